// A study's charts (templates/hpo/study_detail.html), drawn with the vendored ECharts from the JSON the server put
// in #study-chart-data: optimisation history (each complete trial's value and the best so far), intermediate values
// (each trial's metric per step; pruned trials dashed), parallel coordinates (parameters → objective of complete
// trials) and parameter importance (Optuna's PED-ANOVA). live.js swaps the page's live part when the study changes; the charts
// are drawn again from the fresh data.
(function () {
  "use strict";

  const charts = [];

  function numeric(value, choices) {
    return choices ? choices.indexOf(value) : value;
  }

  function draw() {
    charts.splice(0).forEach(function (c) { c.dispose(); });
    const source = document.getElementById("study-chart-data");
    if (!source || !window.echarts) return;
    const data = JSON.parse(source.textContent);
    const complete = data.trials.filter(function (t) { return t.status === "complete" && t.value !== null; });
    const better = data.direction === "minimize" ? Math.min : Math.max;
    const make = function (kind, option) {
      const el = document.querySelector('[data-hpo-chart="' + kind + '"]');
      if (!el) return;
      const chart = window.echarts.init(el);
      chart.setOption(option);
      charts.push(chart);
    };
    let best = null;
    make("history", {
      tooltip: { trigger: "item" },
      legend: { bottom: 0 },
      grid: { top: 20, bottom: 50, left: 50, right: 20 },
      xAxis: { type: "value", name: "#", minInterval: 1 },
      yAxis: { type: "value", name: data.metric, scale: true },
      series: [
        { name: data.metric, type: "scatter", data: complete.map(function (t) { return [t.number, t.value]; }) },
        {
          name: "best", type: "line", step: "end", showSymbol: false,
          data: complete.map(function (t) { best = best === null ? t.value : better(best, t.value); return [t.number, best]; }),
        },
      ],
    });
    make("intermediate", {
      tooltip: { trigger: "item" },
      grid: { top: 20, bottom: 30, left: 50, right: 20 },
      xAxis: { type: "value", name: "step", minInterval: 1 },
      yAxis: { type: "value", name: data.metric, scale: true },
      series: data.trials.filter(function (t) { return t.curve.length; }).map(function (t) {
        return {
          name: "#" + t.number + " (" + t.status + ")", type: "line", data: t.curve,
          lineStyle: { type: t.status === "pruned" ? "dashed" : "solid" },
        };
      }),
    });
    const NAME = { fontSize: 11, lineHeight: 13 };
    const axes = data.params.map(function (name, i) {
      const choices = data.categorical[name];
      const axis = { dim: i, name: window.portalWrapName(name), nameTextStyle: NAME, nameGap: 10 };
      return choices ? Object.assign(axis, { type: "category", data: choices.map(String) }) : axis;
    });
    axes.push({ dim: data.params.length, name: window.portalWrapName(data.metric), nameTextStyle: NAME, nameGap: 10 });
    make("parallel", {
      parallelAxis: axes,
      parallel: { left: 60, right: 70, top: 60, bottom: 20 },
      series: [{
        type: "parallel", lineStyle: { width: 1.5, opacity: 0.6 },
        data: complete.map(function (t) {
          return data.params.map(function (name) {
            const v = t.params[name];
            return data.categorical[name] ? String(v) : (v === undefined ? null : numeric(v));
          }).concat([t.value]);
        }),
      }],
    });
    const names = Object.keys(data.importance);
    make("importance", {
      grid: { top: 10, bottom: 30, left: 80, right: 20 },
      xAxis: { type: "value", max: 1 },
      yAxis: { type: "category", data: names },
      series: [{ type: "bar", data: names.map(function (n) { return data.importance[n]; }) }],
    });
  }

  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("portal:live-swapped", function (event) {
    if (event.target && event.target.id === "study-live") draw();
  });
  window.addEventListener("resize", function () { charts.forEach(function (c) { c.resize(); }); });
})();
