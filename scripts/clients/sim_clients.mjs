// Streams from an OpenAI/Anthropic-compatible server with the official SDKs,
// unmodified, and checks what a client relies on: the event sequence, the
// text, replies that end by themselves or at max_tokens, tool calls the SDKs
// assemble from their streamed deltas, and the usage (cache reads on a
// repeated prefix).
//
// usage: node sim_clients.mjs <base-url> [model]   (e.g. http://127.0.0.1:8100)
// The simulator must run with tool use on (--tool-use above 0) and report
// prompt-token details (its default).
// Prints one JSON line with what it saw; exits 1 on the first failed check.
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

const base = process.argv[2];
if (!base) {
  console.error("usage: node sim_clients.mjs <base-url>");
  process.exit(2);
}
const model = process.argv[3] || "qwen3-4b";

function check(cond, msg) {
  if (!cond) {
    console.error("FAIL: " + msg);
    process.exit(1);
  }
}

const filler = (tag, tokens) => {
  let s = "";
  for (let i = 0; s.length < tokens * 4; i++) s += `${tag}-${i} `;
  return s.slice(0, tokens * 4);
};

const out = {};
const anthropic = new Anthropic({ baseURL: base, apiKey: "sim", maxRetries: 0 });
const system = [{ type: "text", text: filler("system", 600) }];
const first = [{ role: "user", content: filler("task", 400) }];

// 1. Anthropic streaming through the SDK's MessageStream helper, cut by max_tokens
const stream = anthropic.messages.stream({ model, max_tokens: 32, system, messages: first });
let deltas = 0;
stream.on("text", () => deltas++);
const msg1 = await stream.finalMessage();
const text1 = msg1.content.map((b) => (b.type === "text" ? b.text : "")).join("");
check(deltas === 32, `anthropic: ${deltas} text deltas, want 32`);
check(text1.length === 32 * 4, `anthropic: text of ${text1.length} bytes, want 128`);
check(msg1.stop_reason === "max_tokens", `anthropic: stop_reason ${msg1.stop_reason}`);
check(msg1.usage.output_tokens === 32, `anthropic: output_tokens ${msg1.usage.output_tokens}`);
out.anthropic_stream = { deltas, usage: msg1.usage };

// 1b. with room to finish, the reply ends by itself
const free = await anthropic.messages.stream({ model, max_tokens: 30000, system, messages: first }).finalMessage();
check(free.stop_reason === "end_turn", `anthropic: free reply stop_reason ${free.stop_reason}`);
check(free.usage.output_tokens < 30000 && free.usage.output_tokens > 0, `anthropic: free reply of ${free.usage.output_tokens} tokens`);
out.anthropic_free = { stop_reason: free.stop_reason, output_tokens: free.usage.output_tokens };

// 1c. an agent loop with tools: the SDK assembles each tool_use from its
// input_json_delta events; every call's input must satisfy the schema and
// the next request (tool_result) must find the history in the cache
const tools = [
  { name: "Read", description: "read a file", input_schema: { type: "object", properties: {
    file_path: { type: "string" }, offset: { type: "integer", minimum: 0 }, limit: { type: "integer", exclusiveMinimum: 0 } },
    required: ["file_path"], additionalProperties: false } },
  { name: "Edit", description: "edit a file", input_schema: { type: "object", properties: {
    file_path: { type: "string" }, old_string: { type: "string" }, new_string: { type: "string" }, replace_all: { type: "boolean" } },
    required: ["file_path", "old_string", "new_string"], additionalProperties: false } },
  { name: "Report", description: "report findings", input_schema: { type: "object", properties: {
    level: { type: "string", enum: ["low", "high"] },
    findings: { type: "array", minItems: 1, items: { type: "object", properties: {
      file: { type: "string" }, line: { type: "integer", minimum: 1, maximum: 9 } }, required: ["file", "line"] } } },
    required: ["level", "findings"] } },
];
const valid = (name, input) => {
  const schema = tools.find((t) => t.name === name)?.input_schema;
  if (!schema || typeof input !== "object") return false;
  for (const r of schema.required) if (!(r in input)) return false;
  for (const [k, v] of Object.entries(input)) {
    const p = schema.properties[k];
    if (!p) return false;
    if (p.type === "string" && typeof v !== "string") return false;
    if (p.type === "integer" && (!Number.isInteger(v) || (p.minimum !== undefined && v < p.minimum) || (p.maximum !== undefined && v > p.maximum) || (p.exclusiveMinimum !== undefined && v <= p.exclusiveMinimum))) return false;
    if (p.type === "boolean" && typeof v !== "boolean") return false;
    if (p.enum && !p.enum.includes(v)) return false;
    if (p.type === "array" && (!Array.isArray(v) || v.length < p.minItems || !v.every((f) => typeof f.file === "string" && Number.isInteger(f.line) && f.line >= 1 && f.line <= 9))) return false;
  }
  return true;
};
const loop = [{ role: "user", content: filler("agent", 300) }];
let calls = 0, prevPrompt = 0;
for (let turn = 0; turn < 10; turn++) {
  const m = await anthropic.messages.stream({ model, max_tokens: 4096, system, tools, messages: loop }).finalMessage();
  const prompt = m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0);
  if (turn > 0) check(m.usage.cache_read_input_tokens >= prevPrompt - 16, `anthropic tools: turn ${turn} cached ${m.usage.cache_read_input_tokens} of the previous ${prevPrompt}`);
  prevPrompt = prompt;
  loop.push({ role: "assistant", content: m.content });
  const uses = m.content.filter((b) => b.type === "tool_use");
  if (m.stop_reason === "tool_use") {
    check(uses.length === 1, `anthropic tools: ${uses.length} tool_use blocks`);
    check(valid(uses[0].name, uses[0].input), `anthropic tools: invalid input ${JSON.stringify(uses[0])}`);
    calls++;
    loop.push({ role: "user", content: [{ type: "tool_result", tool_use_id: uses[0].id, content: filler(`result${turn}`, 40) }] });
  } else {
    check(m.stop_reason === "end_turn" && uses.length === 0, `anthropic tools: stop_reason ${m.stop_reason}`);
    loop.push({ role: "user", content: filler(`more${turn}`, 20) });
  }
}
check(calls > 0, "anthropic tools: no tool call in 10 turns");
out.anthropic_tools = { calls };

// 2. the next turn resends history: its prefix is served from cache
const second = [...first, { role: "assistant", content: text1 }, { role: "user", content: "continue" }];
const events = [];
const raw = await anthropic.messages.create({ model, max_tokens: 8, system, messages: second, stream: true });
for await (const ev of raw) events.push(ev.type);
check(events[0] === "message_start" && events.at(-1) === "message_stop", `anthropic: events ${events}`);
const msg2 = await anthropic.messages.create({ model, max_tokens: 8, system, messages: second });
check(msg2.usage.cache_read_input_tokens > 1000, `anthropic: cache_read_input_tokens ${msg2.usage.cache_read_input_tokens}`);
out.anthropic_second_turn = { events: [...new Set(events)], usage: msg2.usage };

// 3. OpenAI chat streaming with include_usage
const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "sim", maxRetries: 0 });
const chat = [{ role: "system", content: filler("system", 600) }, { role: "user", content: filler("chat", 400) }];
const cs = await openai.chat.completions.create({
  model, messages: chat, max_tokens: 16, stream: true, stream_options: { include_usage: true },
});
let chatText = "", usage = null, finish = null;
for await (const chunk of cs) {
  if (chunk.choices.length > 0) {
    chatText += chunk.choices[0].delta?.content ?? "";
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  if (chunk.usage) usage = chunk.usage;
}
check(chatText.length === 64, `openai chat: ${chatText.length} bytes`);
// (cut at max_tokens)
check(finish === "length", `openai chat: finish ${finish}`);
check(usage && usage.completion_tokens === 16, `openai chat: usage ${JSON.stringify(usage)}`);
// the system prompt is shared with the Anthropic requests above
check(usage.prompt_tokens_details.cached_tokens >= 592, `openai chat: cached ${usage.prompt_tokens_details.cached_tokens}`);
out.openai_chat_stream = { usage };

// 3b. tool calls through the SDK's stream helper (it assembles tool_calls
// from the argument deltas), forced with tool_choice "required"
const fn = [{ type: "function", function: { name: "Read", description: "read", parameters: tools[0].input_schema } }];
const tc = await openai.chat.completions.stream({ model, messages: chat, tools: fn, tool_choice: "required" }).finalChatCompletion();
const call = tc.choices[0].message.tool_calls?.[0];
check(tc.choices[0].finish_reason === "tool_calls" && call?.function?.name === "Read", `openai tools: ${JSON.stringify(tc.choices[0])}`);
check(valid("Read", JSON.parse(call.function.arguments)), `openai tools: arguments ${call.function.arguments}`);
out.openai_tool_call = { arguments: call.function.arguments };

// 4. the SDK's stream helper and a non-streaming chat call
const helper = openai.chat.completions.stream({ model, messages: chat, max_tokens: 4 });
const final = await helper.finalChatCompletion();
check(final.choices[0].message.content.length === 16, "openai chat helper: text");
const whole = await openai.chat.completions.create({ model, messages: chat, max_tokens: 4 });
check(whole.usage.prompt_tokens_details.cached_tokens > 0, "openai chat: cached on repeat");

// 5. legacy completions, streaming
const comp = await openai.completions.create({ model, prompt: "once upon a time", max_tokens: 5, stream: true });
let compText = "";
for await (const chunk of comp) compText += chunk.choices[0]?.text ?? "";
check(compText.length === 20, `openai completions: ${compText.length} bytes`);

// 6. models list and errors in the SDKs' own types
const models = await openai.models.list();
check(models.data[0].id === model, `models: ${JSON.stringify(models.data)}`);
try {
  await anthropic.messages.create({ model, max_tokens: 4, messages: [{ role: "user", content: filler("x", 40000) }] });
  check(false, "anthropic: too-long prompt accepted");
} catch (e) {
  check(e instanceof Anthropic.BadRequestError, `anthropic: error type ${e?.constructor?.name}`);
  check(e.error?.error?.type === "invalid_request_error", `anthropic: error body ${JSON.stringify(e.error)}`);
}
try {
  await openai.chat.completions.create({ model, messages: [{ role: "user", content: filler("x", 40000) }] });
  check(false, "openai: too-long prompt accepted");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError, `openai: error type ${e?.constructor?.name}`);
}
out.ok = true;
console.log(JSON.stringify(out));
