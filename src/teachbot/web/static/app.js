// teachbot's page. Everything shown is set as text (textContent), never as markup; no eval, no inline code.
// Events arrive on /ws as JSON (see teachbot/web/hub.py), camera frames on /ws/camera (teachbot/web/frames.py).
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const state = { ws: null, retry: 500, status: {}, episodes: new Map(), query: "", pending: null };
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
    const turn = el("div", null, "turn " + (event.speaker === "robot" ? "robot" : "user"));
    turn.appendChild(el("span", event.speaker === "robot" ? "robot" : "you", "who"));
    turn.appendChild(el("span", event.text, "words"));
    box.appendChild(turn);
    while (box.childNodes.length > 400) box.removeChild(box.firstChild);
    box.scrollTop = box.scrollHeight;
  }

  function episodeBlock(id) {
    let block = state.episodes.get(id);
    if (!block) {
      block = el("div", null, "episode");
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
    $("lesson-count").textContent = event.lessons.length + (event.query ? " matching" : "") + " lesson" + (event.lessons.length === 1 ? "" : "s");
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

  const handlers = {
    dialog: onDialog, transcript: onTranscript, objects: onObjects, status: onStatus, pending: onPending,
    lessons: onLessons,
    lessons_changed: () => send({ type: "lessons", query: state.query }),
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
      send({ type: "lessons", query: state.query });
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
    $("estop").addEventListener("click", () => send({ type: "stop" }));
    $("resume").addEventListener("click", () => send({ type: "resume" }));
    $("end").addEventListener("click", () => send({ type: "end" }));
    $("keep").addEventListener("click", () => say("yes"));
    $("reject").addEventListener("click", () => say("no"));
    $("edit").addEventListener("click", () => say($("edit-text").value));
    $("undo").addEventListener("click", () => send({ type: "undo" }));
    $("confirm").addEventListener("change", (event) => send({ type: "confirm_mode", on: event.target.checked }));
    let timer = null;
    $("search").addEventListener("input", (event) => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        state.query = event.target.value.slice(0, 200);
        send({ type: "lessons", query: state.query });
      }, 200);
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    wire();
    connect();
    connectCamera();
  });
})();
