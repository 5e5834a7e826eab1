// teachbot's page. Everything shown is set as text (textContent), never as markup; no eval, no inline code.
// Events arrive on /ws as JSON (see teachbot/web/hub.py), camera frames on /ws/camera (teachbot/web/frames.py).
// The trace timeline asks for the shown episode's spans over /ws every second (teachbot/web/traces.py).
// The emergency stop is a POST to /stop, outside the websockets (it gets through when every page slot is taken).
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const state = { ws: null, retry: 500, status: {}, episodes: new Map(), query: "", offset: 0, page: 20, pending: null, newest: "" };
  const TRACE_POLL_MS = 1000;
  // the timeline: which episode it shows, the spans of its last answer, the picked span and the opened rows
  let trace = freshTrace("", false);
  // what the benchmark and the tests read: typed -> first transcript line shown, and camera frames
  const timings = { typed: [], shown: [], waiting: null };
  const camera = { frames: 0, latencies: [], fromStamp: [], shownAt: [] };
  window.teachbot = { timings, camera };

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function tokensLine(tokens) {
    const line = el("div", null, "line");
    for (const pair of tokens) {
      if (!Array.isArray(pair) || pair.length !== 2) continue;
      const span = el("span", pair[1]);
      if (/^[a-z0-9]{1,3}$/.test(String(pair[0]))) span.className = pair[0];
      line.appendChild(span);
    }
    if (!line.childNodes.length) line.appendChild(el("span", " "));
    return line;
  }

  function note(text, error) {
    const p = $("note");
    p.textContent = text;
    p.className = error ? "note error" : "note";
  }

  function send(message) {
    if (!state.ws || state.ws.readyState !== WebSocket.OPEN) {
      note("not connected to the robot; retrying", true);
      return false;
    }
    state.ws.send(JSON.stringify(message));
    return true;
  }

  // ------------------------------------------------------------------ events
  function onDialog(event) {
    const box = $("dialog");
    for (const old of box.querySelectorAll(".answers")) old.remove();  // the question they answered has been answered
    const turn = el("div", null, "turn " + (event.speaker === "robot" ? "robot" : "user"));
    turn.appendChild(el("span", event.speaker === "robot" ? "robot" : "you", "who"));
    turn.appendChild(el("span", event.text, "words"));
    box.appendChild(turn);
    // a question of the robot: its buttons send its id back (the robot takes a button's answer only for that question)
    const question = event.speaker === "robot" && event.question && typeof event.question.id === "string" ? event.question : null;
    if (question && question.kind === "lesson") state.lessonQuestion = question.id;
    if (question && question.kind === "approval") {
      const row = el("div", null, "row answers");
      const approve = el("button", "Approve", "good");
      approve.id = "approve";
      approve.type = "button";
      approve.dataset.question = question.id;
      approve.addEventListener("click", () => answer(question.id, "yes"));
      const refuse = el("button", "Refuse", "bad");
      refuse.id = "refuse";
      refuse.type = "button";
      refuse.dataset.question = question.id;
      refuse.addEventListener("click", () => answer(question.id, "no"));
      row.append(approve, refuse);
      box.appendChild(row);
    }
    while (box.childNodes.length > 400) box.removeChild(box.firstChild);
    box.scrollTop = box.scrollHeight;
  }

  function episodeBlock(id) {
    let block = state.episodes.get(id);
    if (!block) {
      block = el("div", null, "episode");
      block.dataset.episode = id;
      block.appendChild(el("div", "episode " + id, "episode-id"));
      const lines = el("div", null, "lines");
      block.appendChild(lines);
      $("transcript").appendChild(block);
      state.episodes.set(id, block);
      while (state.episodes.size > 30) {
        const [oldest, node] = state.episodes.entries().next().value;
        node.remove();
        state.episodes.delete(oldest);
      }
      state.newest = id;
      if (!trace.pinned || !trace.episode) showTrace(id, false);  // a new episode: the timeline follows it
      $("trace-newest").hidden = !trace.pinned || trace.episode === id;
    }
    return block.lastChild;
  }

  function onTranscript(event) {
    const lines = episodeBlock(String(event.episode));
    let index = Number(event.first) || 0;
    for (const tokens of event.lines) {
      const line = tokensLine(tokens);
      line.dataset.index = String(index);
      const existing = lines.querySelector('[data-index="' + index + '"]');
      if (existing) existing.replaceWith(line); else lines.appendChild(line);
      index += 1;
    }
    const box = $("transcript");
    box.scrollTop = box.scrollHeight;
    // the first line that holds what the person just typed: the console read it (the benchmark's figure)
    const waiting = timings.waiting;
    if (waiting !== null && event.lines.some((tokens) => tokens.map((pair) => pair[1]).join("").includes(waiting.text))) {
      timings.waiting = null;
      requestAnimationFrame(() => timings.shown.push(performance.now() - waiting.started));
    }
  }

  function onObjects(event) {
    const list = $("objects");
    list.replaceChildren();
    for (const o of event.objects) {
      const pos = Array.isArray(o.position) ? " (" + o.position.map((v) => Number(v).toFixed(2)).join(", ") + ")" : "";
      list.appendChild(el("li", o.name + pos));
    }
    if (!event.objects.length) list.appendChild(el("li", "no objects seen yet", "muted"));
  }

  function onStatus(event) {
    state.status = event;
    $("robot").textContent = event.robot || "";
    const nodes = $("nodes");
    nodes.replaceChildren();
    for (const [name, up] of Object.entries(event.nodes || {})) {
      nodes.appendChild(el("span", name, "pill " + (up ? "on" : "off")));
    }
    const stopped = event.estop === true;
    $("estop").hidden = stopped;
    $("resume").hidden = !stopped;
    document.body.classList.toggle("stopped", stopped);
    if (typeof event.confirm === "boolean") $("confirm").checked = event.confirm;
    $("confirm").indeterminate = typeof event.confirm !== "boolean";
    $("say").maxLength = Number(event.max_text) || 4000;
    $("camera-info").textContent = event.camera_error || event.camera || "";
  }

  function lessonTranscript(target, lines) {
    target.replaceChildren();
    for (const tokens of lines || []) target.appendChild(tokensLine(tokens));
  }

  function onPending(event) {
    state.pending = event.lesson;
    if (!event.lesson) state.lessonQuestion = "";  // answered: a late click answers nothing
    $("pending").hidden = !event.lesson;
    if (!event.lesson) return;
    $("pending-sentence").textContent = event.lesson.improvement || event.lesson.problem;
    $("pending-scope").textContent = event.lesson.scope || "always";
    lessonTranscript($("pending-transcript"), event.lesson.transcript);
    $("edit-text").value = event.lesson.improvement || "";
  }

  function onLessons(event) {
    const list = $("lessons");
    list.replaceChildren();
    const total = Number(event.total) || 0, first = Number(event.offset) || 0, size = Number(event.page) || 1;
    state.offset = first;
    state.page = size;
    $("lesson-count").textContent = total + (event.query ? " matching" : "") + " lesson" + (total === 1 ? "" : "s")
      + (total > size ? " (" + (first + 1) + "-" + (first + event.lessons.length) + ")" : "");
    $("lessons-newer").hidden = first <= 0;
    $("lessons-older").hidden = first + size >= total;
    for (const lesson of event.lessons) {
      const item = el("li", null, "lesson");
      item.dataset.id = lesson.id;
      item.appendChild(el("p", lesson.improvement || "(no sentence)", "sentence"));
      const facts = el("dl");
      const rows = [["problem", lesson.problem], ["applies", lesson.scope], ["learned", (lesson.created || "").replace("T", " ").slice(0, 19)],
        ["episode", lesson.episode_id], ["id", lesson.id]];
      for (const [name, value] of rows) {
        if (!value) continue;
        facts.appendChild(el("dt", name));
        facts.appendChild(el("dd", value));
      }
      item.appendChild(facts);
      const details = el("details");
      details.appendChild(el("summary", "improved interaction"));
      const pre = el("pre", null, "hl");
      lessonTranscript(pre, lesson.transcript);
      details.appendChild(pre);
      item.appendChild(details);
      const remove = el("button", "Remove", "remove");
      remove.type = "button";
      remove.addEventListener("click", () => {
        if (window.confirm("Remove this lesson? The robot forgets it: " + (lesson.improvement || lesson.id))) {
          send({ type: "remove", id: lesson.id });
        }
      });
      item.appendChild(remove);
      list.appendChild(item);
    }
  }


  // ------------------------------------------------------------------ the trace timeline
  function freshTrace(episode, pinned) {
    return { episode, pinned, version: "", spans: [], done: false, selected: null, wantLine: null, opened: new Set(), asked: 0 };
  }

  function showTrace(episode, pinned) {
    trace = freshTrace(episode, pinned);
    $("trace-newest").hidden = !pinned || episode === state.newest;
    drawTrace({ spans: [], total_ms: 0, tracing: true });
    setTimeout(askTrace, 0);  // once per burst (a reconnect replays every episode's transcript)
  }

  function askTrace() {
    if (!trace.episode || document.hidden || !state.ws || state.ws.readyState !== WebSocket.OPEN) return;
    const now = performance.now();
    if (trace.asked && now - trace.asked < 5000) return;  // the last question is still out
    trace.asked = now;
    state.ws.send(JSON.stringify({ type: "trace", episode: trace.episode, known: trace.version }));
  }

  function onTrace(event) {
    if (event.episode !== trace.episode) return;  // an answer for an episode no longer shown
    trace.asked = 0;
    if (event.unchanged) return;
    trace.version = String(event.version || "");
    trace.spans = Array.isArray(event.spans) ? event.spans : [];
    trace.done = event.done === true;
    drawTrace(event);
  }

  function ms(value) {
    const v = Number(value) || 0;
    return v >= 1000 ? (v / 1000).toFixed(2) + " s" : v.toFixed(1) + " ms";
  }

  function attributeList(pairs, into) {
    for (const pair of pairs || []) {
      if (!Array.isArray(pair) || pair.length !== 2) continue;
      into.appendChild(el("dt", pair[0]));
      into.appendChild(el("dd", pair[1]));
    }
  }

  function spanRow(span, total) {
    const row = el("div", null, "span-row" + (span.status === "error" ? " error" : ""));
    row.dataset.id = span.id;
    row.dataset.depth = String(span.depth);
    row.dataset.kind = String(span.name).split(".")[0];
    if (typeof span.line === "number") row.dataset.line = String(span.line);
    const label = el("div", null, "span-label");
    label.style.paddingLeft = (Number(span.depth) * 1.1) + "em";
    const toggle = el("button", trace.opened.has(span.id) ? "\u25be" : "\u25b8", "span-toggle");
    toggle.type = "button";
    toggle.setAttribute("aria-label", "details of " + span.name);
    label.appendChild(toggle);
    label.appendChild(el("span", span.name, "span-name"));
    if (span.node) label.appendChild(el("span", span.node, "span-node"));
    if (span.status === "error") label.appendChild(el("span", "\u26a0 error", "span-error"));
    const hint = (span.shown || [])[0];
    if (hint) label.appendChild(el("span", hint[1], "span-hint"));
    const track = el("div", null, "span-track");
    const bar = el("div", null, "span-bar");
    const scale = total > 0 ? 100 / total : 0;
    bar.style.left = Math.min(100, Number(span.start_ms) * scale) + "%";
    bar.style.width = Math.max(0.3, Number(span.ms) * scale) + "%";
    track.appendChild(bar);
    row.appendChild(label);
    row.appendChild(track);
    row.appendChild(el("div", ms(span.ms), "span-ms"));
    const tip = [span.name + (span.node ? " [" + span.node + "]" : "") + "  +" + ms(span.start_ms) + ", " + ms(span.ms)];
    for (const [key, value] of span.shown || []) tip.push(key + " = " + value);
    if (span.status === "error") tip.push("ERROR " + (span.error || ""));
    row.title = tip.join("\n");
    const details = el("dl", null, "span-details");
    details.hidden = !trace.opened.has(span.id);
    if (span.status === "error") attributeList([["error", span.error || "(no message)"]], details);
    attributeList([["start", "+" + ms(span.start_ms)], ["duration", ms(span.ms)]], details);
    attributeList(span.shown, details);
    attributeList(span.attributes, details);
    toggle.addEventListener("click", (event) => {
      event.stopPropagation();
      if (trace.opened.has(span.id)) trace.opened.delete(span.id); else trace.opened.add(span.id);
      details.hidden = !trace.opened.has(span.id);
      toggle.textContent = details.hidden ? "\u25b8" : "\u25be";
    });
    row.addEventListener("click", () => pickSpan(span.id));
    return [row, details];
  }

  function drawTrace(event) {
    const box = $("timeline");
    const keep = box.scrollTop;
    box.replaceChildren();
    const spans = trace.spans;
    const total = Number(event.total_ms) || 0;
    $("trace-info").textContent = trace.episode ? "episode " + trace.episode + (trace.done ? " \u00b7 ended \u00b7 " : " \u00b7 running \u00b7 ") + spans.length +
      " span" + (spans.length === 1 ? "" : "s") + (total ? " \u00b7 " + ms(total) : "") : "";
    if (!spans.length) {
      const why = event.tracing === false ? "tracing is off (tracing.enabled in config/tracing.yaml)"
        : trace.episode ? "no spans of this episode yet: each step's spans appear once it has ended" : "no episode yet";
      box.appendChild(el("p", why, "muted"));
      return;
    }
    const axis = el("div", null, "span-row span-axis");
    axis.appendChild(el("div", "span", "span-label"));
    const ticks = el("div", null, "span-ticks");
    for (const part of [0, 0.25, 0.5, 0.75, 1]) ticks.appendChild(el("span", part ? ms(total * part) : "0"));
    axis.appendChild(ticks);
    axis.appendChild(el("div", "duration", "span-ms"));
    box.appendChild(axis);
    for (const span of spans) {
      for (const node of spanRow(span, total)) box.appendChild(node);
    }
    if (Number(event.left_out) > 0) box.appendChild(el("p", event.left_out + " more spans not shown (teachbot trace show lists them all)", "muted"));
    box.scrollTop = keep;
    if (trace.selected === null && trace.wantLine !== null) pickLine(trace.wantLine, false);
    else markSelection();
  }

  function rowOf(id) {
    return $("timeline").querySelector('.span-row[data-id="' + CSS.escape(id) + '"]');
  }

  function markSelection() {
    let depth = null;
    for (const row of $("timeline").querySelectorAll(".span-row[data-id]")) {
      const d = Number(row.dataset.depth);
      if (depth !== null && d <= depth) depth = null;  // past the picked span's descendants
      const picked = row.dataset.id === trace.selected;
      row.classList.toggle("selected", picked);
      row.classList.toggle("in-selection", depth !== null && !picked);
      if (picked) depth = d;
    }
  }

  function statementOf(id) {
    // the span's own statement, or the statement it ran under (the rows before it of smaller depth)
    const index = trace.spans.findIndex((s) => s.id === id);
    if (index < 0) return null;
    let depth = Number(trace.spans[index].depth) + 1;
    for (let i = index; i >= 0; i--) {
      const span = trace.spans[i];
      if (Number(span.depth) < depth) {
        if (typeof span.line === "number") return span;
        depth = Number(span.depth);
      }
    }
    return null;
  }

  function pickSpan(id) {
    // a row: it and what ran under it marked, and the console lines of its statement (or the one it ran under)
    trace.selected = id;
    trace.wantLine = null;
    markSelection();
    const statement = statementOf(id);
    if (statement) markLines(trace.episode, statement.line, true);
  }

  function pickLine(first, scroll) {
    // a console statement (its first line): its span, or once it has ended (a span is written then), marked
    const found = trace.spans.find((span) => span.line === first);
    trace.wantLine = found ? null : first;
    trace.selected = found ? found.id : null;
    markSelection();
    markLines(trace.episode, first, false);
    const row = found ? rowOf(found.id) : null;
    if (row && scroll) scrollInto($("timeline"), row);
  }

  function lineAt(episode, index) {
    const block = state.episodes.get(episode);
    return block ? block.lastChild.querySelector('[data-index="' + index + '"]') : null;
  }

  function statementLine(episode, index) {
    // the first line of the statement a console line belongs to (an output belongs to the statement before it)
    for (let i = index; i >= 0; i--) {
      const line = lineAt(episode, i);
      if (line && line.textContent.startsWith(">>> ")) return i;
    }
    return index;
  }

  function markLines(episode, first, scroll) {
    for (const line of $("transcript").querySelectorAll(".line.picked")) line.classList.remove("picked");
    for (let index = first; ; index++) {
      const line = lineAt(episode, index);
      if (!line || (index > first && line.textContent.startsWith(">>> "))) break;
      line.classList.add("picked");
      if (scroll && index === first) scrollInto($("transcript"), line);
    }
  }

  function scrollInto(box, node) {
    const top = node.offsetTop - box.clientHeight / 3;
    box.scrollTop = Math.max(0, top);
  }

  function onTranscriptClick(event) {
    const line = event.target.closest ? event.target.closest(".line") : null;
    const block = line ? line.closest(".episode") : null;
    if (!line || !block || line.dataset.index === undefined) return;
    const episode = block.dataset.episode;
    if (episode !== trace.episode) showTrace(episode, episode !== state.newest);
    pickLine(statementLine(episode, Number(line.dataset.index)), true);
  }

  const handlers = {
    dialog: onDialog, transcript: onTranscript, objects: onObjects, status: onStatus, pending: onPending,
    lessons: onLessons, trace: onTrace,
    lessons_changed: askLessons,
    note: (event) => note(event.text, event.error),
  };

  // ------------------------------------------------------------------ connection
  function connect() {
    const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
    state.ws = ws;
    ws.addEventListener("open", () => {
      state.retry = 500;
      $("connection").textContent = "connected";
      $("connection").className = "pill on";
      $("dialog").replaceChildren();
      $("transcript").replaceChildren();
      state.episodes.clear();
      state.newest = "";
      trace = freshTrace("", false);  // the snapshot's transcript picks the newest episode again
      askLessons();
    });
    ws.addEventListener("message", (message) => {
      let event;
      try { event = JSON.parse(message.data); } catch (err) { return; }
      const handle = event && handlers[event.type];
      if (handle) handle(event);
    });
    ws.addEventListener("close", () => {
      $("connection").textContent = "disconnected";
      $("connection").className = "pill off";
      setTimeout(connect, state.retry);
      state.retry = Math.min(state.retry * 2, 8000);
    });
  }

  function connectCamera() {
    const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/camera");
    ws.binaryType = "arraybuffer";
    const canvas = $("camera");
    const context = canvas.getContext("2d");
    ws.addEventListener("message", async (message) => {
      if (!(message.data instanceof ArrayBuffer) || message.data.byteLength < 4) return;
      const view = new DataView(message.data);
      const length = view.getUint32(0);
      let header;
      try { header = JSON.parse(new TextDecoder().decode(new Uint8Array(message.data, 4, length))); } catch (err) { return; }
      const jpeg = new Blob([new Uint8Array(message.data, 4 + length)], { type: "image/jpeg" });
      let bitmap;
      try { bitmap = await createImageBitmap(jpeg); } catch (err) { return; }
      if (canvas.width !== bitmap.width || canvas.height !== bitmap.height) {
        canvas.width = bitmap.width;
        canvas.height = bitmap.height;
      }
      context.drawImage(bitmap, 0, 0);
      bitmap.close();
      const now = Date.now() / 1000;
      camera.frames += 1;
      camera.latencies.push(now - Number(header.received));  // the bridge got the image -> drawn
      camera.fromStamp.push(now - Number(header.stamp));  // the image's stamp -> drawn (a wall-clock stamp only)
      camera.shownAt.push(now);
      if (camera.latencies.length > 500) { camera.latencies.shift(); camera.fromStamp.shift(); camera.shownAt.shift(); }
    });
    ws.addEventListener("close", () => setTimeout(connectCamera, 1000));
  }

  // ------------------------------------------------------------------ the person's controls
  function askLessons() {
    send({ type: "lessons", query: state.query, offset: state.offset });
  }

  function stopNow() {
    fetch("/stop", { method: "POST", credentials: "same-origin", cache: "no-store" })
      .then((reply) => (reply.ok ? reply.json() : Promise.reject(new Error("HTTP " + reply.status))))
      .then((events) => { for (const event of events) note(event.text, event.error); })
      .catch(() => {
        if (!send({ type: "stop" })) note("the stop did not reach the robot: use the robot's own stop", true);
      });
  }

  function answer(question, text) {
    // a button's answer, tied to the question it was shown with
    const words = text.trim();
    if (!words) return;
    if (!question) {
      note("the robot has not asked yet; wait for its question", true);
      return;
    }
    if (send({ type: "answer", question, text: words })) for (const old of document.querySelectorAll(".answers")) old.remove();
  }

  function say(text) {
    const words = text.trim();
    if (!words) return;
    const started = performance.now();
    if (send({ type: "say", text: words })) {
      timings.typed.push(started);
      timings.waiting = { started, text: words };
    }
  }

  function wire() {
    $("say-form").addEventListener("submit", (event) => {
      event.preventDefault();
      say($("say").value);
      $("say").value = "";
    });
    $("estop").addEventListener("click", stopNow);
    $("resume").addEventListener("click", () => send({ type: "resume" }));
    $("end").addEventListener("click", () => send({ type: "end" }));
    $("keep").addEventListener("click", () => answer(state.lessonQuestion, "yes"));
    $("reject").addEventListener("click", () => answer(state.lessonQuestion, "no"));
    $("edit").addEventListener("click", () => answer(state.lessonQuestion, $("edit-text").value));
    $("undo").addEventListener("click", () => send({ type: "undo" }));
    $("lessons-newer").addEventListener("click", () => { state.offset = Math.max(0, state.offset - state.page); askLessons(); });
    $("lessons-older").addEventListener("click", () => { state.offset += state.page; askLessons(); });
    $("confirm").addEventListener("change", (event) => send({ type: "confirm_mode", on: event.target.checked }));
    $("transcript").addEventListener("click", onTranscriptClick);
    $("trace-newest").addEventListener("click", () => showTrace(state.newest, false));
    setInterval(askTrace, TRACE_POLL_MS);
    let timer = null;
    $("search").addEventListener("input", (event) => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        state.query = event.target.value.slice(0, 200);
        state.offset = 0;
        askLessons();
      }, 200);
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    wire();
    connect();
    connectCamera();
  });
})();
