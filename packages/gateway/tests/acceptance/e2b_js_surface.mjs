// Prints the public names of the installed E2B JavaScript SDK as JSON, grouped as
// scripts/e2b_compatibility.yaml groups them (names as the SDK spells them): Sandbox (static,
// prototype and instance), the classes of its commands/files/pty/git, and what the code
// interpreter's Sandbox adds. A Sandbox object is built offline (no request is made).
import { Sandbox } from "e2b";
import { Sandbox as CodeSandbox } from "@e2b/code-interpreter";

const BUILTIN = new Set(["constructor", "length", "name", "prototype"]);

function names(start) {
  const found = new Set();
  for (let p = start; p && p !== Object.prototype && p !== Function.prototype; p = Object.getPrototypeOf(p)) {
    for (const name of Object.getOwnPropertyNames(p)) {
      if (!BUILTIN.has(name) && !name.startsWith("_")) found.add(name);
    }
  }
  return found;
}

const offline = { sandboxId: "offline", sandboxDomain: "e2b.app", envdVersion: "0.6.3", envdAccessToken: "t", apiKey: `e2b_${"0".repeat(40)}` };
const sbx = new Sandbox(offline);
const sandbox = new Set([...names(Sandbox), ...names(Sandbox.prototype), ...Object.keys(sbx).filter((k) => !k.startsWith("_"))]);
const surface = { Sandbox: sandbox };
for (const part of ["commands", "files", "pty", "git"]) {
  if (sbx[part]) surface[part] = names(Object.getPrototypeOf(sbx[part]));
}
const ci = new Set([...names(CodeSandbox), ...names(CodeSandbox.prototype)]);
surface["code-interpreter"] = new Set([...ci].filter((name) => !sandbox.has(name)));
console.log(JSON.stringify(Object.fromEntries(Object.entries(surface).map(([k, v]) => [k, [...v].sort()]))));
