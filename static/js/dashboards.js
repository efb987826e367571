// The dashboards (home and project overview): live run progress and the overview's charts.
//
// Each active run row (data-live-run) follows its run over the run's log websocket, as the run page does, but
// asks for the lines of task 0, which no task has: the socket then carries the run's status messages (a snapshot
// on connect, then every change) and no log lines. Badges and bars change in place; nothing reloads the page.
// Charts are drawn with the vendored ECharts from the JSON of #overview-chart. Text goes in with textContent.
(function () {
  "use strict";
  const FINAL = ["succeeded", "failed", "cancelled"];
  const FINAL_BAR = { succeeded: "bg-success", failed: "bg-danger", cancelled: "bg-secondary" };
  const NO_RETRY = [4400, 4401, 4404]; // bad request, signed out, not visible: the consumer's final answers
  const MAX_SOCKETS = 20;

  function jsonOf(id) {
    const el = document.getElementById(id);
    if (!el) return null;
    try {
      return JSON.parse(el.textContent);
    } catch (e) {
      return null;
    }
  }

  function update(row, data, labels) {
    if (data.status) {
      const badge = row.querySelector("[data-run-status] .badge");
      if (badge) {
        badge.className = "badge status-" + data.status;
        badge.dataset.status = data.status;
        badge.textContent = labels[data.status] || data.status;
      }
    }
    const bar = row.querySelector("[data-progress]");
    if (!bar) return;
    const fill = bar.querySelector(".progress-bar");
    if (typeof data.done === "number") {
      const total = data.total || 0;
      const finished = FINAL.includes(data.status);
      const percent = total ? Math.round((100 * data.done) / total) : finished ? 100 : 0;
      bar.setAttribute("aria-valuemax", String(total));
      bar.setAttribute("aria-valuenow", String(data.done));
      fill.style.width = percent + "%";
      const text = row.querySelector("[data-progress-text]");
      if (text) text.textContent = data.done + "/" + total;
    }
    if (FINAL_BAR[data.status]) {
      fill.classList.remove("progress-bar-striped", "progress-bar-animated");
      fill.classList.add(FINAL_BAR[data.status]);
      row.querySelectorAll("[data-elapsed]").forEach(function (el) { delete el.dataset.elapsed; }); // stops ticking
    }
  }

  function follow(row, labels) {
    let delay = 1000;
    let ended = false;
    function connect() {
      const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
      const socket = new WebSocket(scheme + window.location.host + row.dataset.ws + "?task=0");
      socket.onopen = function () {
        delay = 1000;
      };
      socket.onmessage = function (event) {
        let message;
        try {
          message = JSON.parse(event.data);
        } catch (e) {
          return;
        }
        if (message.type !== "status" || String(message.run) !== row.dataset.run) return;
        update(row, message, labels);
        if (FINAL.includes(message.status)) {
          ended = true;
          delete row.dataset.liveRun;
          socket.close();
        }
      };
      socket.onclose = function (event) {
        if (ended || NO_RETRY.includes(event.code)) return;
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, 30000);
      };
    }
    connect();
  }

  function followRuns() {
    if (!window.WebSocket) return;
    const labels = jsonOf("run-status-labels") || {};
    Array.from(document.querySelectorAll("[data-live-run]"))
      .slice(0, MAX_SOCKETS)
      .forEach(function (row) {
        follow(row, labels);
      });
  }

  function drawCharts() {
    const data = jsonOf("overview-chart");
    if (!data || typeof echarts === "undefined") return;
    const colours = { succeeded: "#198754", failed: "#dc3545", other: "#adb5bd" };
    const hourColours = ["#0d6efd", "#6f42c1"];
    const days = data.days.map(function (day) {
      return day.slice(5); // MM-DD
    });
    const charts = [];
    document.querySelectorAll("[data-chart]").forEach(function (el) {
      const runs = el.dataset.chart === "runs";
      const series = runs
        ? data.runs.map(function (s) {
            return { name: s.name, type: "bar", stack: "runs", color: colours[s.status], data: s.data };
          })
        : data.hours.map(function (s, i) {
            return { name: s.name, type: "bar", color: hourColours[i % 2], data: s.data };
          });
      const chart = echarts.init(el);
      chart.setOption({
        animation: false,
        title: { text: runs ? data.title_runs : data.title_hours, left: 4, textStyle: { fontSize: 13, fontWeight: 600 } },
        tooltip: { trigger: "axis", renderMode: "richText" },
        legend: { top: 30, textStyle: { fontSize: 11 } },
        grid: { left: 40, right: 12, top: 66, bottom: 28 },
        xAxis: { type: "category", data: days },
        yAxis: { type: "value", minInterval: runs ? 1 : 0 },
        series: series,
      });
      charts.push(chart);
    });
    window.addEventListener("resize", function () {
      charts.forEach(function (chart) {
        chart.resize();
      });
    });
  }

  followRuns();
  drawCharts();
})();
