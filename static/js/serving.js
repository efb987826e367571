// A service's page: the test console (an OIP v2 request, pre-filled from the model's metadata, POSTed to the
// service's router URL with the browser's session) and its traffic charts (vendored ECharts; data from the API's
// metrics action). Text goes in with textContent, never as HTML.
(function () {
  "use strict";

  function csrfToken() {
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  // A field's text as the request's value: a number unless the input takes strings (or the text is not one).
  function fieldValue(text, datatype) {
    const trimmed = text.trim();
    if (datatype !== "BYTES" && trimmed !== "" && !isNaN(Number(trimmed))) return Number(trimmed);
    return trimmed;
  }

  function shellQuote(text) {
    return "'" + text.replace(/'/g, "'\"'\"'") + "'";
  }

  // curl and Python for the request the console would send now, with a placeholder for the token.
  function drawSnippets(request) {
    const box = document.getElementById("console-snippets");
    if (!box) return;
    let body;
    try {
      body = JSON.parse(request.value);
    } catch (e) {
      return; // keep the last good snippets while the JSON is being edited
    }
    const url = box.dataset.url;
    document.getElementById("snippet-curl").textContent =
      "curl -sS -X POST " + shellQuote(url) + " \\\n" +
      '  -H "Authorization: Bearer $PORTAL_TOKEN" \\\n' +
      "  -H 'Content-Type: application/json' \\\n" +
      "  -d " + shellQuote(JSON.stringify(body));
    document.getElementById("snippet-python").textContent =
      "import os\n\nimport requests\n\n" +
      "response = requests.post(\n" +
      "    " + JSON.stringify(url) + ",\n" +
      '    headers={"Authorization": f"Bearer {os.environ[\'PORTAL_TOKEN\']}"},\n' +
      "    json=" + JSON.stringify(body) + ",\n" +
      "    timeout=30,\n)\nresponse.raise_for_status()\nprint(response.json())";
  }

  // One field per feature: the fields write the JSON request (which stays editable under "JSON request").
  function setupFields(form, request) {
    const fields = Array.prototype.slice.call(form.querySelectorAll("[data-feature]"));
    if (!fields.length) return;
    function writeRequest() {
      const datatype = form.dataset.datatype;
      const row = fields.map(function (field) {
        return fieldValue(field.value, datatype);
      });
      const body = { inputs: [{ name: form.dataset.inputName, shape: [1, row.length], datatype: datatype, data: row }] };
      request.value = JSON.stringify(body, null, 2);
      drawSnippets(request);
    }
    fields.forEach(function (field) {
      field.addEventListener("input", writeRequest);
    });
    const button = form.querySelector("[data-console-row]");
    const source = form.querySelector("[data-row-source]");
    button.addEventListener("click", function () {
      const names = fields.map(function (field) {
        return field.dataset.feature;
      });
      source.textContent = "…";
      fetch(form.dataset.sampleUrl + "?features=" + encodeURIComponent(names.join(",")), {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      })
        .then(function (response) {
          return response.json().then(function (data) {
            return { ok: response.ok, data: data };
          });
        })
        .then(function (result) {
          if (!result.ok) {
            const errors = [];
            Object.keys(result.data).forEach(function (key) {
              errors.push([].concat(result.data[key]).join(" "));
            });
            source.textContent = button.dataset.msgError + " " + errors.join(" ");
            return;
          }
          fields.forEach(function (field, i) {
            const value = result.data.values[i];
            field.value = value === null || value === undefined ? "" : String(value);
          });
          source.textContent = interpolate(gettext("%(dataset)s, %(file)s, row %(row)s"), result.data, true);
          writeRequest();
        })
        .catch(function (error) {
          source.textContent = button.dataset.msgError + " " + String(error);
        });
    });
  }

  function formatNumber(value) {
    return Math.abs(value) >= 1000 || (value !== 0 && Math.abs(value) < 0.001) ? value.toExponential(2) : value.toFixed(3);
  }

  // One row's contributions as a small bar list, largest first: to the output column the row scored highest
  // (the predicted class of a classifier), positive bars to the right, negative to the left.
  function drawExplainedRow(box, data, row, index) {
    const outputs = row.output;
    let column = 0;
    outputs.forEach(function (value, j) {
      if (value > outputs[column]) column = j;
    });
    const title = document.createElement("div");
    title.className = "fw-semibold mt-2";
    title.textContent = interpolate(
      box.dataset.msgRow,
      { row: index, column: data.output_columns[column], output: data.output },
      true,
    );
    box.appendChild(title);
    const items = data.feature_names.map(function (name, i) {
      return { name: name, value: row.contributions[i][column] };
    });
    items.sort(function (a, b) {
      return Math.abs(b.value) - Math.abs(a.value);
    });
    const largest = Math.max.apply(null, items.map(function (item) { return Math.abs(item.value); })) || 1;
    const list = document.createElement("ul");
    list.className = "list-unstyled mb-1 explain-bars";
    let sum = 0;
    items.forEach(function (item) {
      sum += item.value;
      const li = document.createElement("li");
      li.className = "d-flex align-items-center gap-2";
      const label = document.createElement("span");
      label.className = "text-truncate font-monospace";
      label.style.width = "30%";
      label.title = item.name;
      label.textContent = item.name;
      const track = document.createElement("span");
      track.className = "d-flex flex-grow-1";
      const left = document.createElement("span");
      const right = document.createElement("span");
      left.className = "d-flex justify-content-end";
      left.style.width = "50%";
      right.style.width = "50%";
      const bar = document.createElement("span");
      bar.className = item.value >= 0 ? "bg-primary" : "bg-danger";
      bar.style.display = "inline-block";
      bar.style.height = "0.8em";
      bar.style.width = (100 * Math.abs(item.value) / largest).toFixed(1) + "%";
      (item.value >= 0 ? right : left).appendChild(bar);
      track.appendChild(left);
      track.appendChild(right);
      const value = document.createElement("span");
      value.className = "font-monospace text-end";
      value.style.width = "5.5em";
      value.textContent = (item.value >= 0 ? "+" : "") + formatNumber(item.value);
      li.appendChild(label);
      li.appendChild(track);
      li.appendChild(value);
      list.appendChild(li);
    });
    box.appendChild(list);
    const note = document.createElement("div");
    note.className = "text-body-secondary";
    const background = data.background || {};
    note.textContent = interpolate(
      box.dataset.msgSum,
      {
        base: formatNumber(row.base_value[column]),
        sum: formatNumber(sum),
        value: formatNumber(outputs[column]),
        method: data.method,
        rows: background.rows,
        dataset: background.dataset ? " (" + background.dataset + ")" : "",
      },
      true,
    );
    box.appendChild(note);
  }

  // Sends the console's request (its JSON box) to `url`; shows the status and time, and the answer pretty-printed
  // (as sent when it is not JSON). `onAnswer(status, data)` gets a JSON answer.
  function postRequest(form, url, output, status, onAnswer) {
    let body;
    try {
      body = JSON.parse(form.elements.request.value);
    } catch (e) {
      output.textContent = output.dataset.msgError + " " + e.message;
      return;
    }
    const started = performance.now();
    status.textContent = "…";
    fetch(url, {
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
        let data;
        try {
          data = JSON.parse(result.text);
        } catch (e) {
          output.textContent = result.text;
          return;
        }
        output.textContent = JSON.stringify(data, null, 2);
        if (onAnswer) onAnswer(result.status, data);
      })
      .catch(function (error) {
        status.textContent = "";
        output.textContent = String(error);
      });
  }

  // The Explain button: the same request to the service's explain endpoint (per-feature contributions against
  // rows of the training data as the background), drawn as bars; the whole answer goes to the response box.
  function setupExplain(form, output, status) {
    const button = form.querySelector("[data-console-explain]");
    const box = document.getElementById("console-explanation");
    if (!button || !box) return;
    button.addEventListener("click", function () {
      box.textContent = "";
      postRequest(form, button.dataset.url, output, status, function (code, data) {
        if (code !== 200 || !Array.isArray(data.rows)) return;
        data.rows.forEach(function (row, i) {
          drawExplainedRow(box, data, row, i);
        });
      });
    });
  }

  function setupConsole() {
    const form = document.getElementById("serving-console");
    if (!form) return;
    const output = document.getElementById("console-response");
    const status = form.querySelector("[data-console-status]");
    setupFields(form, form.elements.request);
    setupExplain(form, output, status);
    form.elements.request.addEventListener("input", function () {
      drawSnippets(form.elements.request);
    });
    drawSnippets(form.elements.request);
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      postRequest(form, form.dataset.url, output, status);
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
            // A minute without requests has no latency (null): with the symbols shown and the gaps bridged, a
            // lone minute of traffic is a visible point rather than a line of zero length (an empty chart).
            series.push({
              name: interpolate(gettext("r%(revision)s %(series)s"), { revision: number, series: SERIES[key] }, true),
              type: "line",
              showSymbol: true,
              symbolSize: 4,
              connectNulls: true,
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
          // The title above the plot, the legend below it: side by side they overlapped on narrow screens.
          legend: { type: "scroll", bottom: 0, textStyle: { fontSize: 10 } },
          grid: { left: 40, right: 10, top: 30, bottom: 50 },
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
