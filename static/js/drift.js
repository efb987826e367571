// The drift monitor page's chart (vendored Apache ECharts): each feature's PSI at each check, the overall score
// dashed, and the threshold as a line. Data from the page's #drift-chart-data (apps/monitoring/services.series).
(function () {
  "use strict";
  const el = document.getElementById("drift-chart");
  const source = document.getElementById("drift-chart-data");
  if (!el || !source || typeof echarts === "undefined") return;
  const data = JSON.parse(source.textContent);
  if (!data.t.length) {
    el.style.height = "auto";
    el.textContent = el.dataset.msgEmpty;
    el.className = "small text-body-secondary";
    return;
  }
  const series = Object.keys(data.features).map(function (name) {
    return { name: name, type: "line", showSymbol: data.t.length < 40, data: data.t.map(function (t, i) { return [t, data.features[name][i]]; }) };
  });
  series.push({
    name: el.dataset.labelOverall, type: "line", lineStyle: { type: "dashed", width: 2 }, showSymbol: false,
    data: data.t.map(function (t, i) { return [t, data.overall[i]]; }),
    markLine: { silent: true, symbol: "none", lineStyle: { color: "#dc3545" }, label: { formatter: el.dataset.labelThreshold },
      data: [{ yAxis: data.threshold }] },
  });
  const chart = echarts.init(el);
  chart.setOption({
    tooltip: { trigger: "axis", renderMode: "richText" },
    legend: { type: "scroll", top: 0 },
    grid: { left: 50, right: 20, top: 36, bottom: 30 },
    xAxis: { type: "time" },
    yAxis: { type: "value", name: "PSI" },
    series: series,
  });
  window.addEventListener("resize", function () { chart.resize(); });
})();
