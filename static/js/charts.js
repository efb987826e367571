// Metric charts of the tracking pages (vendored Apache ECharts). Each `.metric-chart` names its series in
// data-series: [{label, url}], where url is the API's downsampled series endpoint (LTTB, ~500 points), so a
// 1M-point metric costs the browser 500 points. `#parallel-chart` draws the JSON of `#parallel-data`.
// Tooltips render as canvas rich text (not HTML), so run names and keys cannot inject markup.
(function () {
  "use strict";

  if (typeof echarts === "undefined") return;
  const charts = [];
  // One colour per run on every chart of a page (ECharts' default palette, indexed by the run's position).
  const PALETTE = ["#5470c6", "#91cc75", "#fac858", "#ee6666", "#73c0de", "#3ba272", "#fc8452", "#9a60b4",
    "#ea7ccc", "#2f4554"];

  function note(el, text) {
    const caption = el.closest("figure") && el.closest("figure").querySelector("[data-chart-note]");
    if (caption) caption.textContent = text;
  }

  function fetchSeries(item) {
    return fetch(item.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error(response.status + " " + response.statusText);
        return response.json();
      })
      .then(function (data) {
        return { label: item.label, index: item.index, data: data };
      });
  }

  function drawMetric(el) {
    let items;
    try {
      items = JSON.parse(el.dataset.series || "[]");
    } catch (e) {
      return;
    }
    Promise.all(items.map(fetchSeries))
      .then(function (results) {
        const cell = el.closest("[data-chart-cell]");
        if (cell && results.every(function (r) { return r.data.total <= 1; })) {
          cell.remove(); // a single value is in the table below; a one-point chart says nothing more
          return;
        }
        const chart = echarts.init(el);
        charts.push(chart);
        const many = results.length > 1;
        let total = 0;
        let shown = 0;
        const series = results.map(function (r) {
          total += r.data.total;
          shown += r.data.steps.length;
          const points = r.data.steps.map(function (step, i) {
            return [step, r.data.values[i]];
          });
          return {
            name: r.label,
            type: "line",
            color: PALETTE[(r.index || 0) % PALETTE.length],
            data: points,
            showSymbol: points.length < 40,
            symbolSize: 5,
            lineStyle: { width: 1.5 },
            emphasis: { focus: "series" },
          };
        });
        chart.setOption({
          animation: false,
          title: { text: el.dataset.title, left: 4, textStyle: { fontSize: 13, fontWeight: 600 } },
          tooltip: { trigger: "axis", renderMode: "richText" },
          legend: many ? { type: "scroll", top: 22 } : { show: false },
          grid: { left: 56, right: 16, top: many ? 56 : 36, bottom: 36 },
          xAxis: { type: "value", name: el.dataset.xLabel || gettext("step"), nameLocation: "middle", nameGap: 24, min: "dataMin", max: "dataMax" },
          yAxis: { type: "value", scale: true },
          dataZoom: [{ type: "inside" }],
          series: series,
        });
        if (total > shown) note(el, shown + " / " + total + " " + (el.dataset.msgDownsampled || gettext("points (downsampled)")));
        else note(el, total + " " + (el.dataset.msgPoints || gettext("points")));
      })
      .catch(function (error) {
        el.textContent = (el.dataset.msgError || gettext("Could not load the series:")) + " " + error.message;
        el.classList.add("text-danger", "small");
        el.style.height = "auto";
      });
  }

  function drawParallel(el, data) {
    const chart = echarts.init(el);
    charts.push(chart);
    const axes = data.dims.map(function (dim, i) {
      const axis = {
        dim: i,
        name: window.portalWrapName(dim.name),
        nameLocation: "start",
        nameGap: 12,
        nameTextStyle: { fontSize: 11, lineHeight: 13 },
      };
      if (dim.numeric) {
        axis.type = "value";
        axis.scale = true;
      } else {
        axis.type = "category";
        const values = [];
        data.runs.forEach(function (run) {
          const v = run.values[i];
          if (v !== null && values.indexOf(String(v)) < 0) values.push(String(v));
        });
        axis.data = values.sort();
      }
      return axis;
    });
    chart.setOption({
      animation: false,
      tooltip: { renderMode: "richText" },
      legend: { type: "scroll", bottom: 0 },
      parallel: { left: 70, right: 80, top: 40, bottom: 80 },
      parallelAxis: axes,
      series: data.runs.map(function (run) {
        return {
          name: run.name,
          type: "parallel",
          color: PALETTE[data.runs.indexOf(run) % PALETTE.length],
          lineStyle: { width: 2, opacity: 0.8 },
          data: [
            run.values.map(function (v, i) {
              if (v === null) return "-";
              return data.dims[i].numeric ? v : String(v);
            }),
          ],
        };
      }),
    });
  }

  // A pipeline run's resource usage ([data-usage-charts] on the run page): CPU % and resident memory of each task
  // attempt over time, from the runs API's usage action (downsampled on the server to a few hundred points per
  // task). While the run is active (the API says so) it is fetched again every few seconds: the agent stores its
  // samples ten at a time, so there is nothing newer to push sooner; a finished run is fetched once.
  const USAGE_POLL_MS = 5000;
  const MIB = 1024 * 1024;

  function drawUsage(box) {
    const section = box.closest("section") || box.parentElement;
    const noteEl = section.querySelector("[data-usage-note]");
    const cpuEl = box.querySelector('[data-usage="cpu"]');
    const rssEl = box.querySelector('[data-usage="rss"]');
    const gpuEl = box.querySelector('[data-usage="gpu"]');
    const gpuMemEl = box.querySelector('[data-usage="gpu_memory"]');
    const gpuBoxes = box.querySelectorAll("[data-usage-gpu]");
    const warnEl = section.querySelector("[data-usage-warnings]");
    let cpuChart = null;
    let rssChart = null;
    let gpuChart = null;
    let gpuMemChart = null;
    let timer = null;

    function say(text) {
      if (noteEl) noteEl.textContent = text;
    }

    function option(title, unit, series) {
      return {
        animation: false,
        title: { text: title, left: 4, textStyle: { fontSize: 13, fontWeight: 600 } },
        tooltip: { trigger: "axis", renderMode: "richText", valueFormatter: function (v) { return v + " " + unit; } },
        legend: series.length > 1 ? { type: "scroll", top: 22 } : { show: false },
        grid: { left: 56, right: 16, top: series.length > 1 ? 56 : 36, bottom: 28 },
        xAxis: { type: "time" },
        yAxis: { type: "value", min: 0 },
        dataZoom: [{ type: "inside" }],
        series: series,
      };
    }

    function label(task) {
      let name = task.attempt > 1 ? task.node + " #" + task.attempt : task.node;
      if (task.replica && task.replica !== "0") name += " · " + task.replica;
      return name;
    }

    function lines(tasks, key, scale) {
      return tasks.filter(function (task) { return task[key]; }).map(function (task, i) {
        const name = label(task);
        const points = task[key].t.map(function (t, j) {
          return [t, Math.round((task[key].v[j] / scale) * 10) / 10];
        });
        return {
          name: name,
          type: "line",
          color: PALETTE[i % PALETTE.length],
          data: points,
          showSymbol: points.length < 40,
          symbolSize: 4,
          lineStyle: { width: 1.5 },
          emphasis: { focus: "series" },
        };
      });
    }

    function draw(data) {
      if (!data.tasks.length) {
        box.hidden = true;
        say(data.active ? gettext("No samples yet: they appear while tasks run.") : gettext("No resource samples were recorded for this run."));
        return;
      }
      box.hidden = false;
      if (!cpuChart) {
        cpuChart = echarts.init(cpuEl);
        rssChart = echarts.init(rssEl);
        charts.push(cpuChart, rssChart);
      }
      cpuChart.setOption(option(gettext("CPU (percent of one core)"), "%", lines(data.tasks, "cpu", 1)), true);
      rssChart.setOption(option(gettext("Memory (resident, MiB)"), "MiB", lines(data.tasks, "rss", MIB)), true);
      const withGpu = data.tasks.some(function (task) { return task.gpu; });
      gpuBoxes.forEach(function (el) { el.hidden = !withGpu; });
      if (withGpu) {
        if (!gpuChart) {
          gpuChart = echarts.init(gpuEl);
          gpuMemChart = echarts.init(gpuMemEl);
          charts.push(gpuChart, gpuMemChart);
        }
        gpuChart.setOption(option(gettext("GPU utilisation (percent)"), "%", lines(data.tasks, "gpu", 1)), true);
        gpuMemChart.setOption(option(gettext("GPU memory (MiB)"), "MiB", lines(data.tasks, "gpu_memory", MIB)), true);
      }
      if (warnEl) {
        warnEl.replaceChildren();
        data.tasks.forEach(function (task) {
          task.warnings.forEach(function (warning) {
            const item = document.createElement("li");
            item.textContent = label(task) + ": " + warning.reason;
            warnEl.appendChild(item);
          });
        });
        warnEl.hidden = !warnEl.children.length;
      }
      let total = 0;
      let shown = 0;
      data.tasks.forEach(function (task) {
        total += task.total;
        shown += task.cpu.t.length;
      });
      const count = total > shown ? shown + " / " + total + " " + gettext("samples (downsampled)") : total + " " + gettext("samples");
      say(count + (data.active ? " · " + gettext("updating while the run runs") : ""));
    }

    function load() {
      timer = null;
      if (document.hidden) {
        timer = setTimeout(load, USAGE_POLL_MS); // a tab in the background asks for nothing
        return;
      }
      fetch(box.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) {
          if (!response.ok) throw new Error(response.status + " " + response.statusText);
          return response.json();
        })
        .then(function (data) {
          draw(data);
          if (data.active) timer = setTimeout(load, USAGE_POLL_MS);
        })
        .catch(function (error) {
          say(gettext("Could not load the resource usage:") + " " + error.message);
          if (box.dataset.active === "1") timer = setTimeout(load, USAGE_POLL_MS * 3);
        });
    }

    // The run ended (the run's websocket said so): fetch the last samples now rather than at the next tick.
    document.addEventListener("portal:run-status", function (event) {
      if (["succeeded", "failed", "cancelled"].includes(event.detail.status) && timer !== null) {
        clearTimeout(timer);
        timer = setTimeout(load, 500);
      }
    });
    load();
  }

  // Bar and scatter views of the compared runs, from the same data as the parallel coordinates: the bar chart shows
  // one chosen number per run; the scatter plots one number against another, a point per run (labelled). Only the
  // numeric dimensions are offered; a run without the value is left out of that view.
  function drawCompareViews(box, data) {
    const numeric = data.dims
      .map(function (dim, i) {
        return { name: dim.name, index: i, numeric: dim.numeric };
      })
      .filter(function (dim) {
        return dim.numeric;
      });
    const selects = {
      bar: box.querySelector("[data-compare-bar-metric]"),
      x: box.querySelector("[data-compare-x]"),
      y: box.querySelector("[data-compare-y]"),
    };
    const firstMetric = numeric.findIndex(function (dim) {
      return dim.name.indexOf("metrics.") === 0;
    });
    const defaults = {
      bar: Math.max(firstMetric, 0),
      x: numeric.findIndex(function (dim) {
        return dim.name.indexOf("params.") === 0;
      }),
      y: Math.max(firstMetric, 0),
    };
    if (defaults.x < 0 || defaults.x === defaults.y) defaults.x = defaults.y === 0 ? Math.min(1, numeric.length - 1) : 0;
    Object.keys(selects).forEach(function (key) {
      numeric.forEach(function (dim, i) {
        const option = document.createElement("option");
        option.value = String(i);
        option.textContent = dim.name;
        selects[key].appendChild(option);
      });
      selects[key].value = String(defaults[key]);
    });
    const bar = echarts.init(box.querySelector("[data-compare-bar]"));
    const scatter = echarts.init(box.querySelector("[data-compare-scatter]"));
    charts.push(bar, scatter);
    function value(run, dim) {
      const v = run.values[dim.index];
      return typeof v === "number" && isFinite(v) ? v : null;
    }
    function draw() {
      const dim = numeric[Number(selects.bar.value)];
      bar.setOption(
        {
          animation: false,
          tooltip: { trigger: "item", renderMode: "richText" },
          grid: { left: 60, right: 20, top: 20, bottom: 60 },
          xAxis: { type: "category", data: data.runs.map(function (run) { return run.name; }),
                   axisLabel: { interval: 0, rotate: data.runs.length > 4 ? 30 : 0, width: 120, overflow: "truncate" } },
          yAxis: { type: "value", scale: true, name: dim.name, nameTextStyle: { align: "left" } },
          series: [{
            type: "bar",
            data: data.runs.map(function (run, i) {
              return { value: value(run, dim), itemStyle: { color: PALETTE[i % PALETTE.length] } };
            }),
          }],
        },
        true,
      );
      const dx = numeric[Number(selects.x.value)];
      const dy = numeric[Number(selects.y.value)];
      scatter.setOption(
        {
          animation: false,
          tooltip: { trigger: "item", renderMode: "richText", formatter: function (p) {
            return p.data.name + "\n" + dx.name + " = " + p.data.value[0] + "\n" + dy.name + " = " + p.data.value[1];
          } },
          grid: { left: 60, right: 50, top: 30, bottom: 50 },
          xAxis: { type: "value", scale: true, name: dx.name, nameLocation: "middle", nameGap: 30 },
          yAxis: { type: "value", scale: true, name: dy.name },
          series: [{
            type: "scatter",
            symbolSize: 12,
            label: { show: true, position: "right", formatter: "{b}", fontSize: 10 },
            data: data.runs
              .map(function (run, i) {
                return { name: run.name, value: [value(run, dx), value(run, dy)],
                         itemStyle: { color: PALETTE[i % PALETTE.length] } };
              })
              .filter(function (point) {
                return point.value[0] !== null && point.value[1] !== null;
              }),
          }],
        },
        true,
      );
    }
    Object.keys(selects).forEach(function (key) {
      selects[key].addEventListener("change", draw);
    });
    draw();
    box.dataset.ready = "1";
  }

  document.querySelectorAll("[data-usage-charts]").forEach(drawUsage);
  document.querySelectorAll(".metric-chart").forEach(drawMetric);
  const parallel = document.getElementById("parallel-chart");
  const parallelData = document.getElementById("parallel-data");
  if (parallel && parallelData) drawParallel(parallel, JSON.parse(parallelData.textContent));
  const compareViews = document.querySelector("[data-compare-views]");
  if (compareViews && parallelData) drawCompareViews(compareViews, JSON.parse(parallelData.textContent));
  window.addEventListener("resize", function () {
    charts.forEach(function (chart) {
      chart.resize();
    });
  });
})();
