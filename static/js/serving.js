// A service's page: the test console (an OIP v2 request, pre-filled from the model's metadata, POSTed to the
// service's router URL with the browser's session) and its traffic charts (vendored ECharts; data from the API's
// metrics action). Text goes in with textContent, never as HTML.
(function () {
  "use strict";

  function csrfToken() {
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  function setupConsole() {
    const form = document.getElementById("serving-console");
    if (!form) return;
    const output = document.getElementById("console-response");
    const status = form.querySelector("[data-console-status]");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      let body;
      try {
        body = JSON.parse(form.elements.request.value);
      } catch (e) {
        output.textContent = output.dataset.msgError + " " + e.message;
        return;
      }
      const started = performance.now();
      status.textContent = "…";
      fetch(form.dataset.url, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
        body: JSON.stringify(body),
      })
        .then(function (response) {
          return response.text().then(function (text) {
            return { status: response.status, text: text };
          });
        })
        .then(function (result) {
          status.textContent = result.status + " · " + Math.round(performance.now() - started) + " ms";
          try {
            output.textContent = JSON.stringify(JSON.parse(result.text), null, 2);
          } catch (e) {
            output.textContent = result.text;
          }
        })
        .catch(function (error) {
          status.textContent = "";
          output.textContent = String(error);
        });
    });
  }

  function drawChart(el) {
    if (typeof echarts === "undefined") return;
    fetch(el.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error(response.status + " " + response.statusText);
        return response.json();
      })
      .then(function (data) {
        const revisions = Object.keys(data.revisions || {});
        if (!revisions.length) {
          el.textContent = el.dataset.msgEmpty || "";
          el.style.height = el.dataset.msgEmpty ? "auto" : "0";
          el.classList.add("small", "text-body-secondary");
          return;
        }
        const series = [];
        const SERIES = { requests: gettext("requests"), errors: gettext("errors"), p50_ms: "p50", p99_ms: "p99" };
        revisions.forEach(function (number) {
          const points = data.revisions[number];
          const keys = el.dataset.kind === "latency" ? ["p50_ms", "p99_ms"] : ["requests", "errors"];
          keys.forEach(function (key) {
            series.push({
              name: interpolate(gettext("r%(revision)s %(series)s"), { revision: number, series: SERIES[key] }, true),
              type: "line",
              showSymbol: false,
              data: points.t.map(function (t, i) {
                return [t, points[key][i]];
              }),
            });
          });
        });
        const chart = echarts.init(el);
        chart.setOption({
          title: { text: el.dataset.title, textStyle: { fontSize: 12 } },
          tooltip: { trigger: "axis", renderMode: "richText" },
          legend: { top: 0, right: 0, textStyle: { fontSize: 10 } },
          grid: { left: 40, right: 10, top: 40, bottom: 25 },
          xAxis: { type: "time" },
          yAxis: { type: "value" },
          series: series,
        });
        window.addEventListener("resize", function () {
          chart.resize();
        });
      })
      .catch(function (error) {
        el.textContent = String(error);
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    setupConsole();
    document.querySelectorAll(".serving-chart").forEach(drawChart);
  });
  // A rollout settled and live.js swapped in the console drawn from what serves now: bind its form.
  document.addEventListener("portal:live-swapped", function (event) {
    if (event.target.id === "service-console") setupConsole();
  });
})();
