// Streams one long reply through the warden with an official SDK,
// unmodified, and reports how the stream ended: the Go test that runs it
// (faults/) kills or stops the replica serving it after the script says
// "streaming", and a stream cut that way must reach the SDK as its own
// APIError (the API's error event), not as a parse error, a hang or a
// reply that looks whole but is short.
//
// usage: node warden_cut.mjs <warden-base-url> anthropic|openai
// Prints "streaming" after the first text, then one JSON line:
// {"api", "events", "error_class", "api_error", "message", "finished"}.
import Anthropic, { APIError as AnthropicAPIError } from "@anthropic-ai/sdk";
import OpenAI, { APIError as OpenAIAPIError } from "openai";
import { randomUUID } from "node:crypto";

const [base, api] = process.argv.slice(2);
if (!base || (api !== "anthropic" && api !== "openai")) {
  console.error("usage: node warden_cut.mjs <warden-base-url> anthropic|openai");
  process.exit(2);
}
const model = "qwen3-4b";
const session = randomUUID();
let events = 0;
const said = () => {
  if (++events === 1) console.log("streaming");
};
const out = { api, events: 0, error_class: "", api_error: false, message: "", finished: false };

try {
  if (api === "anthropic") {
    const client = new Anthropic({ baseURL: base, apiKey: "warden-test", maxRetries: 0,
      defaultHeaders: { "X-Claude-Code-Session-Id": session } });
    const stream = client.messages.stream({ model, max_tokens: 20000,
      messages: [{ role: "user", content: "write a very long story" }] });
    stream.on("text", said);
    await stream.finalMessage();
  } else {
    const client = new OpenAI({ baseURL: base + "/v1", apiKey: "warden-test", maxRetries: 0,
      defaultHeaders: { "X-Session-Id": session } });
    const stream = await client.chat.completions.create({ model, max_tokens: 20000, stream: true,
      messages: [{ role: "user", content: "write a very long story" }] });
    for await (const chunk of stream) {
      if (chunk.choices?.[0]?.delta?.content) said();
    }
  }
  out.finished = true;
} catch (e) {
  out.error_class = e?.constructor?.name ?? typeof e;
  out.api_error = e instanceof AnthropicAPIError || e instanceof OpenAIAPIError;
  out.message = String(e?.message ?? e);
}
out.events = events;
console.log(JSON.stringify(out));
