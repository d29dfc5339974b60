// Type-checks Grafana dashboard JSON files against Grafana's own published schema: the
// TypeScript types of the dashboard model (v1, schemaVersion 39 and later) and of the panel
// options of the panel types the files use, from npm's @grafana/schema. Each file becomes a
// typed object literal, so TypeScript's excess-property checks flag any field the schema does
// not know, as well as every wrong type. Two allowances, both JSON's: an enum's value is its
// string (the types declare TypeScript enums), and a panel's options and field config may
// leave out what the panel plugin defaults (the schema marks those fields required).
//
//   node check_grafana_schema.mjs TOOLS_DIR FILE.json...
// TOOLS_DIR holds node_modules with typescript and @grafana/schema (scripts/setup.sh
// --test-tools installs them). Prints "ok N" and exits 0, or prints tsc's errors and exits 1.
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { createRequire } from "node:module";

const [tools, ...files] = process.argv.slice(2);
const require = createRequire(join(tools, "package.json"));
const ts = require("typescript");
const raw = "@grafana/schema/dist/types/raw";
// [name, has a FieldConfig of its own]
const kinds = { timeseries: ["TimeSeries", true], stat: ["Stat", false], table: ["Table", true] };

const lines = [
  `import type { Dashboard } from "${raw}/dashboard/x/types.gen";`,
  ...Object.entries(kinds).map(
    ([k, [n]]) => `import type * as ${n} from "${raw}/composable/${k}/panelcfg/x/types.gen";`
  ),
  "type Json<T> = T extends string ? `${T}` : T extends object ? { [K in keyof T]: Json<T[K]> } : T;",
  "type Defaulted<T> = T extends string ? `${T}` : T extends object ? { [K in keyof T]?: Defaulted<T[K]> } : T;",
];
const lit = (v) => JSON.stringify(v, null, 2);
files.forEach((f, i) => {
  const d = JSON.parse(readFileSync(f, "utf8"));
  lines.push(`// ${f}`, `export const dashboard${i}: Json<Dashboard> = ${lit(d)};`);
  const panels = (d.panels || []).flatMap((p) => (p.type === "row" ? p.panels || [] : [p]));
  for (const p of panels) {
    if (!kinds[p.type]) {
      console.error(`${f}: panel ${p.id} "${p.title}": type ${p.type} is not checked here`);
      process.exit(1);
    }
    const [n, hasFieldConfig] = kinds[p.type];
    const at = `dashboard${i}_panel${p.id}`;
    lines.push(`export const ${at}_options: Defaulted<${n}.Options> = ${lit(p.options || {})};`);
    const custom = (p.fieldConfig && p.fieldConfig.defaults && p.fieldConfig.defaults.custom) || {};
    if (hasFieldConfig) {
      lines.push(`export const ${at}_custom: Defaulted<${n}.FieldConfig> = ${lit(custom)};`);
    } else if (Object.keys(custom).length) {
      console.error(`${f}: panel ${p.id} "${p.title}": a ${p.type} panel has no custom field config`);
      process.exit(1);
    }
  }
});
const dir = mkdtempSync(join(tmpdir(), "grafana-schema-"));
const file = join(dir, "check.ts");
writeFileSync(file, lines.join("\n") + "\n");
const program = ts.createProgram([file], {
  noEmit: true,
  strict: true,
  skipLibCheck: true,
  module: ts.ModuleKind.ESNext,
  target: ts.ScriptTarget.ES2022,
  moduleResolution: ts.ModuleResolutionKind.Node10,
  baseUrl: join(tools, "node_modules"),
  typeRoots: [],
  types: [],
});
const diags = ts.getPreEmitDiagnostics(program);
if (diags.length) {
  const host = {
    getCanonicalFileName: (x) => x,
    getCurrentDirectory: () => dir,
    getNewLine: () => "\n",
  };
  console.log(ts.formatDiagnostics(diags, host));
  process.exit(1);
}
console.log(`ok ${files.length}`);
