// The model version page's feature importance chart (vendored Apache ECharts): one horizontal bar per feature, the most
// important on top. Data from the page's #explanation-chart-data (apps/models/explanation.Explanation.chart).
(function () {
  "use strict";
  const el = document.getElementById("explanation-chart");
  const source = document.getElementById("explanation-chart-data");
  if (!el || !source || typeof echarts === "undefined") return;
  const data = JSON.parse(source.textContent);
  const chart = echarts.init(el);
  chart.setOption({
    tooltip: { trigger: "axis", axisPointer: { type: "shadow" }, renderMode: "richText" },
    grid: { left: 10, right: 30, top: 10, bottom: 30, containLabel: true },
    xAxis: { type: "value", name: el.dataset.labelImportance, nameLocation: "middle", nameGap: 22 },
    yAxis: { type: "category", data: data.features },
    series: [{ type: "bar", data: data.importances, label: { show: true, position: "right", formatter: function (p) { return p.value.toPrecision(3); } } }],
  });
  window.addEventListener("resize", function () { chart.resize(); });
})();
