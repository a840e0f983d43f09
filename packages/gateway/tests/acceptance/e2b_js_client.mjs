// The E2B JavaScript/TypeScript SDK (npm `e2b` and `@e2b/code-interpreter`), unmodified, against
// the gateway: what a JS user's code does, configured as docs/guides/gateway.md says (only the
// environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY; or the domain form, E2B_DOMAIN and
// E2B_API_KEY, over HTTPS). Prints ONE JSON line of what each
// step saw (values, not verdicts; test_e2b_javascript.py asserts them). Every step records its
// own error and the run goes on; exit status 0 means "the JSON was written".
// Test-only environment: SCENARIO_WORKDIR (the sandbox's folder for files), SCENARIO_HTTP_PORT
// (a free port for a server started in the sandbox), SCENARIO_CHART_CODE (matplotlib code); in
// the domain form HTTPS_PROXY (the offline stand-in for wildcard DNS, given to the SDK as its
// `proxy` option; Node's global fetch follows it through the preloaded e2b_js_proxy.mjs).
import http from "node:http";
import { readFileSync } from "node:fs";
import { CommandExitError, Sandbox } from "e2b";
import { Sandbox as CodeSandbox } from "@e2b/code-interpreter";

const WORKDIR = (process.env.SCENARIO_WORKDIR || "/home/user").replace(/\/$/, "");
const HTTP_PORT = Number(process.env.SCENARIO_HTTP_PORT || "8000");
// Unset in the domain form (E2B_DOMAIN only): then every URL is https://<name>.<domain>.
const SANDBOX_URL = process.env.E2B_SANDBOX_URL;
// The SDK's own proxy option (its API and envd clients ignore HTTPS_PROXY), set only when the
// environment names a proxy: the domain-form run reaches its wildcard names through one.
const conn = process.env.HTTPS_PROXY ? { proxy: process.env.HTTPS_PROXY } : {};
const steps = {};
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function step(name, body) {
  try {
    const value = await body();
    steps[name] = value === undefined ? null : value;
    return value;
  } catch (err) {
    const cause = err?.cause ? ` (cause: ${err.cause})` : "";
    steps[name] = { error: `${err?.name}: ${err?.message}${cause}`, stack: String(err?.stack).slice(0, 2000) };
    return undefined;
  }
}

async function raised(call) {
  try {
    const value = await call();
    return { raised: null, value: typeof value === "object" ? value?.constructor?.name : value };
  } catch (err) {
    return { raised: err?.name, exitCode: err?.exitCode, stderr: err?.stderr };
  }
}

async function until(check, ms = 5000) {
  const deadline = Date.now() + ms;
  let value = await check();
  while (!value && Date.now() < deadline) {
    await sleep(100);
    value = await check();
  }
  return value;
}

function info(i) {
  return {
    sandboxId: i.sandboxId,
    templateId: i.templateId,
    metadata: i.metadata,
    state: i.state,
    secondsLeft: i.endAt ? Math.round((new Date(i.endAt) - Date.now()) / 100) / 10 : null,
  };
}

async function listed(suite) {
  const paginator = Sandbox.list({ query: { metadata: { suite } }, ...conn });
  const found = [];
  while (paginator.hasNext) found.push(...(await paginator.nextItems()).map((s) => s.sandboxId));
  return found.sort();
}

// GET http://<the gateway>/ with `Host: <getHost(port)>`: a browser opening the host name, the
// gateway's address standing in for the wildcard DNS record (node:http, as fetch keeps Host).
function getByHost(host, path) {
  const gateway = new URL(SANDBOX_URL);
  return new Promise((resolve, reject) => {
    const req = http.get(
      { host: gateway.hostname, port: gateway.port, path, headers: { Host: host }, timeout: 10000 },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk) => (body += chunk));
        res.on("end", () => resolve({ status: res.statusCode, body }));
      },
    );
    req.on("error", reject);
    req.on("timeout", () => req.destroy(new Error("timeout")));
  });
}

const suite = Math.random().toString(16).slice(2, 14);
steps.suite = suite;
await step("unknownKey", () => raised(() => Sandbox.create("base", { apiKey: `e2b_${"0".repeat(40)}`, ...conn })));
const sbx = await step("create", () =>
  Sandbox.create("base", {
    timeoutMs: 120_000,
    metadata: { suite, owner: "acceptance-js" },
    envs: { ACCEPTANCE_VAR: "from-create" },
    ...conn,
  }),
);
if (sbx) {
  const sid = sbx.sandboxId;
  steps.create = { sandboxId: sid };
  await step("echo", async () => {
    const r = await sbx.commands.run("echo hi; echo err >&2");
    return { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode };
  });
  await step("envVar", async () => (await sbx.commands.run("echo $ACCEPTANCE_VAR")).stdout);
  await step("exitCode", async () => {
    try {
      const r = await sbx.commands.run("echo oops >&2; exit 3");
      return { raised: null, exitCode: r.exitCode };
    } catch (err) {
      return {
        raised: err.name,
        isCommandExitError: err instanceof CommandExitError,
        exitCode: err.exitCode,
        stderr: err.stderr,
      };
    }
  });
  await step("streaming", async () => {
    const chunks = [];
    const r = await sbx.commands.run("for i in 1 2 3; do echo line$i; sleep 0.2; done", {
      onStdout: (data) => chunks.push(data),
    });
    return { chunks, stdout: r.stdout };
  });
  await step("background", async () => {
    // Killed only once its command runs: the local sandboxd's `bash -l` sources the host's
    // profile first, and a shell killed in there can leave its locks behind (pyenv's rehash).
    let out = "";
    const handle = await sbx.commands.run("echo started; sleep 60", {
      background: true,
      onStdout: (data) => (out += data),
    });
    const started = await until(() => out.includes("started"), 30000);
    const running = (await sbx.commands.list()).some((p) => p.pid === handle.pid);
    const killed = await handle.kill();
    const waited = await raised(() => handle.wait());
    const gone = await until(async () => !(await sbx.commands.list()).some((p) => p.pid === handle.pid));
    return { pid: handle.pid, started, running, killed, waited, gone };
  });
  await step("stdin", async () => {
    const handle = await sbx.commands.run("cat", { background: true, stdin: true });
    await sbx.commands.sendStdin(handle.pid, "hello stdin\n");
    await sbx.commands.closeStdin(handle.pid);
    const r = await handle.wait();
    return { stdout: r.stdout, exitCode: r.exitCode };
  });
  await step("reconnect", async () => {
    const started = await sbx.commands.run("sleep 0.5; echo done", { background: true });
    const chunks = [];
    const again = await sbx.commands.connect(started.pid, { onStdout: (data) => chunks.push(data) });
    const r = await again.wait();
    return { stdout: r.stdout, chunks, exitCode: r.exitCode };
  });
  await step("binaryAndMany", async () => {
    const payload = new Uint8Array(1024 * 1024).map((_, i) => (i * 7919) % 256);
    await sbx.files.write(`${WORKDIR}/js-blob.bin`, payload.buffer);
    const back = await sbx.files.read(`${WORKDIR}/js-blob.bin`, { format: "bytes" });
    const many = await sbx.files.write([
      { path: `${WORKDIR}/js-many/one.txt`, data: "1" },
      { path: `${WORKDIR}/js-many/two.txt`, data: new Blob(["2"]) },
    ]);
    return {
      identical: Buffer.compare(Buffer.from(back), Buffer.from(payload)) === 0,
      many: many.map((w) => w.path),
      read: [await sbx.files.read(many[0].path), await sbx.files.read(many[1].path)],
    };
  });
  await step("files", async () => {
    const path = `${WORKDIR}/js-a.txt`;
    const written = await sbx.files.write(path, "hello from js\n");
    const read = await sbx.files.read(path);
    const listedNames = (await sbx.files.list(WORKDIR)).map((e) => e.name);
    const exists = await sbx.files.exists(path);
    const renamed = await sbx.files.rename(path, `${WORKDIR}/js-b.txt`);
    const existsAfterRename = await sbx.files.exists(path);
    const readRenamed = await sbx.files.read(`${WORKDIR}/js-b.txt`);
    await sbx.files.remove(`${WORKDIR}/js-b.txt`);
    const existsAfterRemove = await sbx.files.exists(`${WORKDIR}/js-b.txt`);
    const madeDir = await sbx.files.makeDir(`${WORKDIR}/js-dir/sub`);
    const madeAgain = await sbx.files.makeDir(`${WORKDIR}/js-dir/sub`);
    const dirType = (await sbx.files.getInfo(`${WORKDIR}/js-dir/sub`)).type;
    const missingRead = await raised(() => sbx.files.read(`${WORKDIR}/js-none.txt`));
    return {
      writtenPath: written.path,
      writtenName: written.name,
      read,
      listed: listedNames.includes("js-a.txt"),
      exists,
      renamedPath: renamed.path,
      existsAfterRename,
      readRenamed,
      existsAfterRemove,
      madeDir,
      madeAgain,
      dirType,
      missingRead,
    };
  });
  await step("watchDir", async () => {
    const dir = `${WORKDIR}/js-watched`;
    await sbx.files.makeDir(dir);
    const events = [];
    const handle = await sbx.files.watchDir(dir, (e) => events.push({ name: e.name, type: e.type }));
    try {
      await sbx.files.write(`${dir}/new.txt`, "x");
      await until(() => events.some((e) => e.name === "new.txt"));
    } finally {
      await handle.stop();
    }
    return { events };
  });
  await step("signedUrls", async () => {
    const path = `${WORKDIR}/js-signed.txt`;
    const upload = await sbx.uploadUrl(path);
    const form = new FormData();
    form.append("file", new Blob(["through a signed url from js\n"]), "x");
    const posted = await fetch(upload, { method: "POST", body: form });
    const download = await sbx.downloadUrl(path, { useSignatureExpiration: 120_000 });
    const fetched = await fetch(download);
    const forged = await fetch(download.replace("signature=v1_", "signature=v1_x"));
    return {
      uploadStatus: posted.status,
      downloadStatus: fetched.status,
      downloaded: await fetched.text(),
      forgedStatus: forged.status,
      readBySdk: await sbx.files.read(path),
    };
  });
  await step("getHost", async () => {
    await sbx.files.write(`${WORKDIR}/js-served/index.txt`, "served from the sandbox\n");
    // Every interface: the suite's sandboxes are local processes, each pod one loopback
    // address, so a server on 127.0.0.1 would not be on the pod's address (a real pod's
    // envd forwards it; sandboxd's tests cover that).
    const server = await sbx.commands.run(
      `python3 -m http.server ${HTTP_PORT} --bind 0.0.0.0 --directory ${WORKDIR}/js-served`,
      { background: true },
    );
    try {
      const host = sbx.getHost(HTTP_PORT);
      const open = SANDBOX_URL
        ? () => getByHost(host, "/index.txt")
        : async () => {
            const res = await fetch(`https://${host}/index.txt`); // as a browser opens it
            return { status: res.status, body: await res.text() };
          };
      let got = null;
      await until(async () => {
        got = await open().catch((err) => ({ status: 0, body: `${err} ${err.cause ?? ""}` }));
        return got.status === 200;
      }, 15000);
      if (!SANDBOX_URL) return { host, status: got.status, body: got.body };
      const byHeaders = await fetch(`${SANDBOX_URL}/index.txt`, {
        headers: { "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": String(HTTP_PORT) },
      });
      return { host, status: got.status, body: got.body, byHeaders: [byHeaders.status, await byHeaders.text()] };
    } finally {
      await server.kill();
    }
  });
  steps.domain = { sandboxDomain: sbx.sandboxDomain ?? null, envdHost: sbx.getHost(49983) };
  await step("getInfo", async () => info(await sbx.getInfo()));
  await step("setTimeout", async () => {
    await sbx.setTimeout(60_000);
    let after = info(await sbx.getInfo());
    await until(async () => (after = info(await sbx.getInfo())).secondsLeft <= 61, 3000);
    return after;
  });
  await step("isRunning", () => sbx.isRunning());
  await step("list", () => listed(suite));
  await step("pause", async () => {
    await sbx.files.write(`${WORKDIR}/js-before-pause.txt`, "kept\n");
    const paused = await sbx.pause();
    let state = null;
    await until(async () => (state = (await Sandbox.getInfo(sid, conn)).state) === "paused", 20000);
    return { paused, state };
  });
  await step("connect", async () => {
    const again = await Sandbox.connect(sid, { timeoutMs: 60_000, ...conn });
    const state = (await Sandbox.getInfo(sid, conn)).state;
    const r = await again.commands.run(`cat ${WORKDIR}/js-before-pause.txt`);
    return { sandboxId: again.sandboxId, state, stdout: r.stdout };
  });
  await step("kill", () => sbx.kill());
  await step("killAgain", () => Sandbox.kill(sid, conn));
  await step("listAfterKill", () => listed(suite));
  await step("getInfoAfterKill", () => raised(() => Sandbox.getInfo(sid, conn)));
}

const ci = await step("ciCreate", () => CodeSandbox.create({ timeoutMs: 120_000, ...conn }));
if (ci) {
  steps.ciCreate = { sandboxId: ci.sandboxId };
  try {
    await step("ciValue", async () => (await ci.runCode("x = 40 + 2\nx")).text);
    await step("ciState", async () => (await ci.runCode("x + 1")).text);
    await step("ciStdout", async () => {
      const chunks = [];
      const execution = await ci.runCode("import time\nprint('one')\ntime.sleep(0.3)\nprint('two')", {
        onStdout: (out) => chunks.push(out.line),
      });
      return { chunks, logs: execution.logs.stdout };
    });
    await step("ciError", async () => {
      const { error } = await ci.runCode("1 / 0");
      return error ? { name: error.name, value: error.value, traceback: Boolean(error.traceback) } : null;
    });
    await step("ciJs", async () => {
      const context = await ci.createCodeContext({ language: "js" });
      const first = await ci.runCode("const items = [1, 2, 3]\nitems.length * 10", { context });
      const second = await ci.runCode("console.log('js says hi')\nitems.map((n) => n * 2).join(',')", {
        context,
      });
      const missing = await ci.runCode("notDefinedAnywhere + 1", { context });
      return {
        language: context.language,
        first: first.text,
        second: second.text,
        secondStdout: second.logs.stdout,
        missing: missing.error ? { name: missing.error.name, value: missing.error.value } : null,
      };
    });
    await step("ciBash", async () => {
      const execution = await ci.runCode("echo $((6 * 7))", { language: "bash" });
      return { stdout: execution.logs.stdout, errorName: execution.error?.name ?? null };
    });
    await step("ciChart", async () => {
      const execution = await ci.runCode(process.env.SCENARIO_CHART_CODE);
      if (execution.error) return { error: `${execution.error.name}: ${execution.error.value}` };
      const result = execution.results[0];
      const png = Buffer.from(result.png || "", "base64");
      const chart = result.chart;
      return {
        results: execution.results.length,
        formats: result.formats(),
        text: result.text,
        pngSignature: png.subarray(0, 8).toString("hex"),
        pngBytes: png.length,
        chartType: chart?.type,
        title: chart?.title,
        xLabel: chart?.x_label,
        yLabel: chart?.y_label,
        bars: (chart?.elements || []).map((e) => [e.label, e.group, e.value]),
      };
    });
  } finally {
    await step("ciKill", () => ci.kill());
  }
}

const version = (name) =>
  JSON.parse(readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url))).version;
console.log(
  JSON.stringify({
    versions: { node: process.version, e2b: version("e2b"), codeInterpreter: version("@e2b/code-interpreter") },
    steps,
  }),
);
