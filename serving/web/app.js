// The kotrans web page: translate through the HTTP API, then explore every attention map of the translation.
// Plain JavaScript, no build step and no network beyond this server.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { explanation: null, pairs: [], speechLevels: [] };
const SPEECH_LEVELS = { formal: "formal 합쇼체", polite: "polite 해요체", plain: "plain 해라체" };

async function call(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: body ? { "Content-Type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const data = await response.json();
  if (!response.ok) throw new Error(data.error ? data.error.message : response.statusText);
  return data;
}

function option(value, label) {
  const element = document.createElement("option");
  element.value = value;
  element.textContent = label;
  return element;
}

function fill(select, options, keep) {
  const previous = select.value;
  select.replaceChildren(...options.map(([value, label]) => option(value, label)));
  if (keep && options.some(([value]) => String(value) === previous)) select.value = previous;
}

async function loadModel() {
  const model = await call("GET", "/v1/model");
  state.pairs = model.language_pairs;
  state.speechLevels = model.speech_levels;
  $("model").textContent = `${model.model_name} ${model.model_version} · ${model.encoder_layers}+${model.decoder_layers} layers · ` +
    `d=${model.model_dim} · ${model.device} ${model.precision}`;
  $("beam").max = model.limits.max_beam_size;
  fill($("speech-level"), [["", "model default"], ...state.speechLevels.map((level) => [level, SPEECH_LEVELS[level] || level])]);
  const languages = [...new Set(state.pairs.map((pair) => pair.source_lang))];
  fill($("source-lang"), languages.map((lang) => [lang, lang]));
  updateTargets();
}

function updateTargets() {
  const source = $("source-lang").value;
  const targets = state.pairs.filter((pair) => pair.source_lang === source).map((pair) => [pair.target_lang, pair.target_lang]);
  fill($("target-lang"), targets, true);
  updateSpeechLevel();
}

// A speech level is asked only of translations into Korean, and only of a model trained with level tags.
function updateSpeechLevel() {
  $("speech-level").parentElement.hidden = $("target-lang").value !== "ko" || state.speechLevels.length === 0;
}

function swap() {
  const source = $("source-lang").value;
  const target = $("target-lang").value;
  if (!state.pairs.some((pair) => pair.source_lang === target && pair.target_lang === source)) return;
  $("source-lang").value = target;
  updateTargets();
  $("target-lang").value = source;
  updateSpeechLevel();
  const translation = $("translation").textContent;
  if (translation) $("text").value = translation;
}

async function translate() {
  const text = $("text").value;
  if (!text.trim()) return;
  const beam = Number($("beam").value) || 4;
  const request = {
    text,
    source_lang: $("source-lang").value,
    target_lang: $("target-lang").value,
    options: { beam_size: beam, nbest: Math.min(beam, 4) },
  };
  const level = $("speech-level");
  if (!level.parentElement.hidden && level.value) request.options.speech_level = level.value;
  if (!$("rerank").checked) request.options.reconstruction_weight = 0;
  $("translate").disabled = true;
  $("error").textContent = "";
  try {
    const result = await call("POST", "/v1/translate", request);
    showTranslation(result);
    try {
      state.explanation = await call("POST", "/v1/explain", request);
      showAttention();
    } catch (error) {
      $("attention").hidden = true;
      $("error").textContent = `attention: ${error.message}`;
    }
  } catch (error) {
    $("error").textContent = error.message;
  } finally {
    $("translate").disabled = false;
  }
}

function showTranslation(result) {
  $("translation").textContent = result.translation;
  $("hypotheses").replaceChildren(...result.hypotheses.map((hypothesis) => {
    const item = document.createElement("li");
    const score = document.createElement("span");
    score.className = "score";
    score.textContent = hypothesis.score.toFixed(3);
    item.append(hypothesis.text, score);
    return item;
  }));
}

function showAttention() {
  const sentences = state.explanation.sentences;
  fill($("sentence"), sentences.map((sentence, i) => [i, `${i + 1}: ${sentenceText(sentence)}`]));
  $("sentence").parentElement.hidden = sentences.length < 2;
  updatePickers();
  $("attention").hidden = false;
}

// A sentence's source without the control pieces around it: <2xx>, a speech level's tag (asked or the model's default), </s>.
function sentenceText(sentence) {
  const levelTags = state.speechLevels.map((level) => `<${level}>`);
  const pieces = sentence.source_pieces.slice(1, -1).filter((piece) => !levelTags.includes(piece));
  return pieces.join("").replaceAll("▁", " ").trim();
}

function updatePickers() {
  const maps = currentSentence()[$("kind").value];
  fill($("layer"), maps.map((_, i) => [i, String(i + 1)]), true);
  if (!$("layer").dataset.touched) $("layer").value = String(maps.length - 1);  // the last layer first
  fill($("head"), [["mean", "average of heads"], ...maps[0].map((_, i) => [i, String(i + 1)])], true);
  draw();
}

function currentSentence() {
  return state.explanation.sentences[Number($("sentence").value) || 0];
}

function labels(sentence, kind) {
  if (kind === "encoder") return [sentence.source_pieces, sentence.source_pieces];
  if (kind === "decoder") return [sentence.target_pieces, sentence.decoder_input_pieces];
  return [sentence.target_pieces, sentence.source_pieces];
}

function chosenMap(heads, head) {
  if (head !== "mean") return heads[Number(head)];
  return heads[0].map((row, r) => row.map((_, c) => heads.reduce((sum, map) => sum + map[r][c], 0) / heads.length));
}

function draw() {
  const sentence = currentSentence();
  const kind = $("kind").value;
  const weights = chosenMap(sentence[kind][Number($("layer").value)], $("head").value);
  const [rows, columns] = labels(sentence, kind);
  const header = document.createElement("tr");
  header.append(document.createElement("th"), ...columns.map((piece, c) => cell("th", piece, { column: c })));
  const body = weights.map((row, r) => {
    const line = document.createElement("tr");
    line.dataset.testid = "heatmap-row";
    line.append(cell("th", rows[r], { row: r }), ...row.map((weight, c) => {
      const td = cell("td", "", { row: r, column: c });
      td.style.background = colour(weight);
      td.title = `${rows[r]} → ${columns[c]}: ${weight.toFixed(3)}`;
      return td;
    }));
    return line;
  });
  const head = document.createElement("thead");
  head.append(header);
  const tbody = document.createElement("tbody");
  tbody.append(...body);
  $("heatmap").replaceChildren(head, tbody);
  $("heatmap").onmouseover = (event) => highlight(event, weights);
  $("heatmap").onmouseleave = () => clearHighlight();
}

function cell(tag, text, position) {
  const element = document.createElement(tag);
  element.textContent = text;
  if (position.row !== undefined) element.dataset.row = position.row;
  if (position.column !== undefined) element.dataset.column = position.column;
  return element;
}

// White to deep blue; light enough at the low end that small weights still read as small.
function colour(weight) {
  const shade = (from, to) => Math.round(from + (to - from) * weight);
  return `rgb(${shade(255, 20)}, ${shade(255, 60)}, ${shade(255, 160)})`;
}

function clearHighlight() {
  for (const element of $("heatmap").querySelectorAll(".active, .target")) {
    element.classList.remove("active", "target");
    if (element.tagName === "TH") element.style.background = "";
  }
}

// A row piece lights up the column pieces it attends to; a column piece lights up the row pieces attending to it.
function highlight(event, weights) {
  const piece = event.target.closest("th");
  if (!piece) return;
  clearHighlight();
  const table = $("heatmap");
  const { row, column } = piece.dataset;
  piece.classList.add("target");
  if (row !== undefined) {
    table.querySelectorAll("thead th[data-column]").forEach((th) => mark(th, weights[row][th.dataset.column]));
  } else if (column !== undefined) {
    table.querySelectorAll("tbody th[data-row]").forEach((th) => mark(th, weights[th.dataset.row][column]));
  }
}

function mark(element, weight) {
  element.classList.add("active");
  element.style.background = `rgba(255, 200, 0, ${Math.min(1, weight * 1.5).toFixed(3)})`;
}

document.addEventListener("DOMContentLoaded", () => {
  $("source-lang").addEventListener("change", updateTargets);
  $("target-lang").addEventListener("change", updateSpeechLevel);
  $("swap").addEventListener("click", swap);
  $("translate").addEventListener("click", translate);
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate();
  });
  $("sentence").addEventListener("change", updatePickers);
  $("kind").addEventListener("change", updatePickers);
  $("layer").addEventListener("change", () => { $("layer").dataset.touched = "yes"; draw(); });
  $("head").addEventListener("change", draw);
  loadModel().catch((error) => { $("error").textContent = `cannot reach the server: ${error.message}`; });
});
