// A hand-rolled MCP stdio server on Node (libuv pipes): tool `echo(text)`.
// Run: node stdio_node.js
"use strict";
const tools = [{ name: "echo", description: "Return the text.",
  inputSchema: { type: "object", properties: { text: { type: "string" } } } }];
let buf = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  buf += chunk;
  let end;
  while ((end = buf.indexOf("\n")) >= 0) {
    const line = buf.slice(0, end);
    buf = buf.slice(end + 1);
    if (!line.trim()) continue;
    const msg = JSON.parse(line);
    if (msg.id === undefined) continue;
    let result;
    if (msg.method === "initialize") {
      result = { protocolVersion: msg.params.protocolVersion || "2025-06-18",
        capabilities: { tools: {} }, serverInfo: { name: "stdio-node", version: "1" } };
    } else if (msg.method === "tools/list") {
      result = { tools };
    } else if (msg.method === "tools/call") {
      result = { content: [{ type: "text", text: String((msg.params.arguments || {}).text) }],
        isError: false };
    } else {
      process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id: msg.id,
        error: { code: -32601, message: msg.method } }) + "\n");
      continue;
    }
    process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id: msg.id, result }) + "\n");
  }
});
process.stdin.on("end", () => process.exit(0));
