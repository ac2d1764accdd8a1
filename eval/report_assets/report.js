// report.html's script (inlined by eval/compare/html.py): builds the query table from the
// embedded JSON, sorts and filters it, and renders a query's trajectories when its row is
// first opened (rendering thousands of them up front would make large reports slow to open).
// The ids, classes and data- attributes used here are a contract that tests rely on.
(function () {
  "use strict";

  const data = JSON.parse(document.getElementById("report-data").textContent);
  const labels = data.labels;
  const base = data.baseline;
  const table = document.getElementById("query-table");
  const tbody = table.tBodies[0];
  const taskFilter = document.getElementById("task-filter");
  const textFilter = document.getElementById("text-filter");
  const count = document.getElementById("query-count");
  const columns = table.tHead.rows[0].cells.length;
  const SHORT_TEXT = 200; // characters of a query shown in its row; the detail has it whole

  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  function esc(value) {
    return String(value).replace(/[&<>"']/g, (ch) => ESCAPES[ch]);
  }
  function points(value) {
    return (value * 100).toFixed(1);
  }
  function signed(value) {
    const text = (value * 100).toFixed(1);
    if (text === "0.0" || text === "-0.0") return "0.0";
    return value > 0 ? "+" + text : text;
  }
  function short(text) {
    return text.length > SHORT_TEXT ? text.slice(0, SHORT_TEXT) + "…" : text;
  }

  // ---- the query table -----------------------------------------------------------------

  const rows = data.rows.map((r, index) => ({
    index: index,
    task: r[0],
    id: r[1],
    text: r[2],
    lower: r[2].toLowerCase(),
    scores: r[3],
    el: null,
    detail: null,
    open: false,
  }));

  function rowHtml(r) {
    const cells = [
      `<td>${esc(r.task)}</td>`,
      `<td class="qid">${esc(r.id)}</td>`,
      `<td class="text">${esc(short(r.text))}</td>`,
    ];
    labels.forEach((label, i) => {
      cells.push(`<td class="num" data-run="${esc(label)}">${points(r.scores[i])}</td>`);
    });
    labels.forEach((label, i) => {
      if (i === base) return;
      const d = r.scores[i] - r.scores[base];
      const kind = d > 0 ? "up" : d < 0 ? "down" : "same";
      cells.push(`<td class="num delta ${kind}" data-delta="${esc(label)}">${signed(d)}</td>`);
    });
    return (
      `<tr class="query" data-task="${esc(r.task)}" data-query="${esc(r.id)}" ` +
      `data-index="${r.index}">${cells.join("")}</tr>`
    );
  }

  tbody.innerHTML = rows.map(rowHtml).join("");
  rows.forEach((r, i) => {
    r.el = tbody.rows[i];
  });

  function applyFilters() {
    const task = taskFilter.value;
    const needle = textFilter.value.trim().toLowerCase();
    let shown = 0;
    for (const r of rows) {
      const visible = (task === "" || r.task === task) && (needle === "" || r.lower.includes(needle));
      r.el.hidden = !visible;
      if (r.detail) r.detail.hidden = !(visible && r.open);
      if (visible) shown += 1;
    }
    count.textContent = `${shown} of ${rows.length} queries`;
  }

  let pending = null;
  taskFilter.addEventListener("change", applyFilters);
  textFilter.addEventListener("input", () => {
    clearTimeout(pending); // typing into thousands of rows: filter once the user pauses
    pending = setTimeout(applyFilters, 120);
  });

  const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });
  function sortKey(spec) {
    if (spec === "task") return (a, b) => data.tasks.indexOf(a.task) - data.tasks.indexOf(b.task);
    if (spec === "query") return (a, b) => collator.compare(a.id, b.id);
    if (spec === "text") return (a, b) => collator.compare(a.text, b.text);
    // a run's label sorts by its score, "delta:" and a label by its change from the baseline
    const delta = spec.startsWith("delta:");
    const i = labels.indexOf(delta ? spec.slice("delta:".length) : spec);
    if (!delta) return (a, b) => a.scores[i] - b.scores[i];
    return (a, b) => a.scores[i] - a.scores[base] - (b.scores[i] - b.scores[base]);
  }

  function sortBy(th) {
    const descending = th.dataset.dir === "asc"; // a second click on a column reverses it
    for (const other of table.tHead.querySelectorAll("th[data-sort]")) {
      delete other.dataset.dir;
      other.removeAttribute("aria-sort");
    }
    th.dataset.dir = descending ? "desc" : "asc";
    th.setAttribute("aria-sort", descending ? "descending" : "ascending");
    const compare = sortKey(th.dataset.sort);
    const sign = descending ? -1 : 1;
    const sorted = rows.slice().sort((a, b) => sign * compare(a, b) || a.index - b.index);
    const fragment = document.createDocumentFragment();
    for (const r of sorted) {
      fragment.appendChild(r.el);
      if (r.detail) fragment.appendChild(r.detail); // an open trajectory stays under its query
    }
    tbody.appendChild(fragment);
  }

  for (const th of table.tHead.querySelectorAll("th[data-sort]")) {
    th.addEventListener("click", () => sortBy(th));
  }

  tbody.addEventListener("click", (event) => {
    if (event.target.closest("tr.detail")) return;
    const tr = event.target.closest("tr.query");
    if (tr) toggle(rows[Number(tr.dataset.index)]);
  });

  function toggle(r) {
    r.open = !r.open;
    if (r.open && !r.detail) {
      const tr = document.createElement("tr");
      tr.className = "detail";
      tr.dataset.task = r.task;
      tr.dataset.query = r.id;
      tr.innerHTML = `<td colspan="${columns}">${detailHtml(r)}</td>`;
      r.el.after(tr);
      r.detail = tr;
    }
    if (r.detail) r.detail.hidden = !r.open;
    r.el.classList.toggle("open", r.open);
  }

  // ---- trajectories ----------------------------------------------------------------------

  function detailHtml(r) {
    const parts = [`<p class="full-text"><b>${esc(r.id)}</b> ${esc(r.text)}</p>`];
    parts.push('<div class="trajectories">');
    labels.forEach((label, i) => parts.push(trajectoryHtml(label, i, r)));
    parts.push("</div>");
    return parts.join("");
  }

  function grade(task, query, doc) {
    const judged = (data.qrels[task] || {})[query] || {};
    return judged[doc];
  }

  function docHtml(r, id) {
    const g = grade(r.task, r.id, id);
    if (g > 0) {
      return (
        `<span class="doc relevant" data-doc="${esc(id)}" data-grade="${g}" ` +
        `title="relevant, grade ${g}">${esc(id)}</span>`
      );
    }
    return `<span class="doc not-relevant" data-doc="${esc(id)}" title="not relevant or unjudged">${esc(id)}</span>`;
  }

  function docList(r, docs) {
    if (!docs.length) return '<p class="empty">(no documents)</p>';
    const items = docs.map((d) => {
      const [id, score] = Array.isArray(d) ? d : [d, null];
      const shown = score === null || score === undefined ? "" : ` <small>${esc(score)}</small>`;
      return `<li>${docHtml(r, id)}${shown}</li>`;
    });
    return `<ol class="docs">${items.join("")}</ol>`;
  }

  function trajectoryHtml(label, i, r) {
    const t = ((data.traj[label] || {})[r.task] || {})[r.id];
    const head =
      `<h4>${esc(label)}${i === base ? ' <span class="tag">baseline</span>' : ""}` +
      ` <span class="score">${data.metric} ${points(r.scores[i])}</span></h4>`;
    const parts = [`<div class="trajectory" data-run="${esc(label)}">`, head];
    if (!t || !t.stages.length) {
      parts.push('<p class="empty">no record of this query in this run</p>');
    } else {
      for (const stage of t.stages) parts.push(stageHtml(r, stage));
    }
    if (t) {
      parts.push(
        `<div class="final-top10"><h5>final top 10 (of ${t.ranked} ranked)</h5>` +
          `${docList(r, t.top)}</div>`
      );
    }
    parts.push("</div>");
    return parts.join("");
  }

  function stageHtml(r, stage) {
    const facts = [];
    if (stage.calls) facts.push(`${stage.calls} LLM calls, ${stage.tokens[0]} in / ${stage.tokens[1]} out`);
    if (stage.seconds !== null && stage.seconds !== undefined) facts.push(`${stage.seconds} s`);
    const parts = [
      `<div class="stage" data-stage="${esc(stage.stage)}">`,
      `<div class="stage-head">stage <b>${esc(stage.stage)}</b> ${esc(facts.join("; "))}</div>`,
    ];
    if (stage.error) parts.push(`<p class="error">FAILED: ${esc(stage.error)}</p>`);
    for (const step of stage.steps) parts.push(stepHtml(r, step));
    parts.push("</div>");
    return parts.join("");
  }

  // Fields a step's own markup shows; any other is listed as "key: value".
  const SHOWN = new Set([
    "node", "output", "tokens", "cached", "finish", "calls", "query", "query_is_text", "expansion", "docs",
    "found", "window", "in", "out", "tool", "arguments", "result", "error", "doc_id", "rank",
    "score", "judged_by",
  ]);

  function stepHtml(r, s) {
    const head = [`<b>${esc(s.node)}</b>`];
    if (s.tool !== undefined) head.push(`<code>${esc(s.tool)}(${esc(s.arguments || "")})</code>`);
    if (s.tokens) head.push(`<small>${s.tokens[0]} in / ${s.tokens[1]} out</small>`);
    if (s.cached) head.push("<small>cached</small>");
    if (s.finish) head.push(`<small class="warn">finish: ${esc(s.finish)}</small>`);
    const parts = [`<div class="step" data-node="${esc(s.node)}">`, `<div class="step-head">${head.join(" ")}</div>`];
    if (s.output !== undefined) {
      parts.push(`<pre class="output">${esc(s.output || "(empty)")}</pre>`);
    }
    for (const call of s.calls || []) {
      parts.push(`<div class="call">calls <code>${esc(call.name)}(${esc(call.arguments)})</code></div>`);
    }
    if (s.query_is_text) parts.push('<div class="search-query">query: the query\'s text</div>');
    if (s.query !== undefined) parts.push(`<div class="search-query">query: ${esc(s.query)}</div>`);
    if (s.expansion) {
      parts.push(`<details><summary>expansion</summary><pre>${esc(s.expansion)}</pre></details>`);
    }
    if (s.doc_id !== undefined) {
      parts.push(
        `<div class="judgement">${docHtml(r, s.doc_id)} was rank ${esc(s.rank)}: score ` +
          `${esc(s.score)} from ${esc(s.judged_by)}</div>`
      );
    }
    if (s.window) {
      parts.push(`<div class="window">window positions ${s.window[0] + 1}–${s.window[1]}</div>`);
      parts.push(`<div class="window-in">in:${docList(r, s.in)}</div>`);
      parts.push(`<div class="window-out">out:${docList(r, s.out)}</div>`);
    }
    if (s.docs) {
      parts.push(`<div class="found">top ${s.docs.length} of ${s.found}:</div>${docList(r, s.docs)}`);
    }
    if (s.result !== undefined && s.docs && !s.error) {
      // the hits are listed above; their snippets only on demand
      parts.push(`<details><summary>result</summary><pre class="result">${esc(s.result)}</pre></details>`);
    } else if (s.result !== undefined) {
      parts.push(`<pre class="result${s.error ? " error" : ""}">${esc(s.result)}</pre>`);
    } else if (s.error) {
      parts.push(`<p class="error">${esc(s.error)}</p>`);
    }
    const rest = Object.keys(s).filter((k) => !SHOWN.has(k) && s[k] !== null && s[k] !== "");
    if (rest.length) {
      const items = rest.map((k) => `<li><b>${esc(k)}</b>: ${esc(s[k])}</li>`);
      parts.push(`<ul class="fields">${items.join("")}</ul>`);
    }
    parts.push("</div>");
    return parts.join("");
  }

  applyFilters();
  document.body.dataset.ready = "1";
})();
