// The TypeScript SDK's MCP client (@modelcontextprotocol/sdk) against the gateway's /mcp.
// Runs the scenario of mcp_scenario.py and prints one JSON line of what it saw; the pytest
// side (test_mcp_typescript.py) checks it. Environment: MCP_URL, MCP_KEY, MCP_POOL, MCP_ROOT.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const { MCP_URL, MCP_KEY, MCP_POOL, MCP_ROOT } = process.env;
const transport = new StreamableHTTPClientTransport(new URL(MCP_URL), {
  requestInit: { headers: { Authorization: `Bearer ${MCP_KEY}` } },
});
const client = new Client({ name: "agent-sandbox-ts-test", version: "1.0.0" });
await client.connect(transport);

const text = (result) => result.content.filter((b) => b.type === "text").map((b) => b.text).join("\n");
async function call(name, args) {
  const result = await client.callTool({ name, arguments: args });
  return { isError: Boolean(result.isError), text: text(result), content: result.content };
}

const seen = {};
seen.tools = (await client.listTools()).tools.map((t) => t.name).sort();
const got = await call("get_sandbox", { name: MCP_POOL, source: "pool" });
const box = JSON.parse(got.text).sandbox_id;
seen.write = await call("write_file", { sandbox_id: box, path: "ts/data.txt", content: "hello from ts" });
const code = `print(open(${JSON.stringify(MCP_ROOT + "/ts/data.txt")}).read()[::-1])`;
seen.code = JSON.parse((await call("run_code", { sandbox_id: box, code })).text);
const image = await call("run_code", { sandbox_id: box, code: process.env.MCP_PNG_CODE });
seen.images = image.content.filter((b) => b.type === "image").map((b) => b.mimeType);
seen.unknownArg = await call("list_files", { sandbox_id: box, path: ".", recursive: true });
seen.outside = await call("write_file", { sandbox_id: box, path: "/etc/x", content: "no" });
seen.stillServing = (await call("list_sandboxes", {})).isError === false;
seen.deleted = await call("delete_sandbox", { sandbox_id: box });
seen.afterDelete = await call("describe_sandbox", { sandbox_id: box });
await client.close();
console.log(JSON.stringify(seen));
