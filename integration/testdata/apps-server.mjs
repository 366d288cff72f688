// An MCP Apps server built with the official Apps SDK: one tool whose
// _meta points at a ui:// resource, and that resource (HTML). APPS_HTML,
// when set, is the file the resource serves (tests change it).
import { McpServer } from "@modelcontextprotocol/server";
import { StdioServerTransport } from "@modelcontextprotocol/server/stdio";
import { registerAppTool, registerAppResource, RESOURCE_MIME_TYPE } from "@modelcontextprotocol/ext-apps/server";
import { readFileSync } from "node:fs";
import * as z from "zod/v4";

const server = new McpServer({ name: "apps-fixture", version: "1.0.0" });
const uri = "ui://weather/view.html";
registerAppTool(server, "weather", {
  description: "Get the weather for a city, shown in a view",
  inputSchema: z.object({ city: z.string() }),
  _meta: { ui: { resourceUri: uri } },
}, async ({ city }) => ({ content: [{ type: "text", text: `sunny in ${city}` }], structuredContent: { city, sky: "sunny" } }));
registerAppResource(server, "Weather View", uri, {}, async () => ({
  contents: [{ uri, mimeType: RESOURCE_MIME_TYPE, text: process.env.APPS_HTML ? readFileSync(process.env.APPS_HTML, "utf8") : "<html><body>weather view</body></html>" }],
}));
await server.connect(new StdioServerTransport());
