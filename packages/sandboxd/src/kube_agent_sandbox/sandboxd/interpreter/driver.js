'use strict';
// The REPL driver of JavaScript and TypeScript contexts: `node driver.js EVENT_FD TOKEN LANGUAGE`.
//
// It speaks the protocol of driver.py (the Python worker), so the server drives both alike:
// commands arrive as frames on stdin, events (ready, count, result, error, done) leave as frames
// on EVENT_FD, user output goes to the real fds 1 and 2, and before each event a numbered sync
// marker is written to both so the server can order output and events. A frame is a 4-byte
// big-endian length and that many bytes of UTF-8 JSON.
//
// Cells are evaluated in this process's own realm through the inspector's `Runtime.evaluate` in
// REPL mode (what Deno's and Chrome's consoles use): top-level `await`, declarations that persist
// into the next cell and may be declared again, and the completion value of the cell as its
// result. The call is made inside `vm.runInThisContext(..., {breakOnSigint: true})`, so SIGINT
// (the server's interrupt) stops a synchronous loop; a SIGINT while the cell awaits ends the wait.
// Static `import` statements become dynamic imports resolved from the working directory.
// TypeScript is stripped first by `module.stripTypeScriptTypes` (Node >= 22.13) or the
// `typescript` package, whichever the sandbox has.

const fs = require('node:fs');
const inspector = require('node:inspector');
const Module = require('node:module');
const path = require('node:path');
const url = require('node:url');
const util = require('node:util');
const vm = require('node:vm');

const MAX_FRAME = 64 * 1024 * 1024;
const MAX_FIELD_CHARS = 4 * 1024 * 1024;
const SYNC_START = Buffer.from('\x00\x1fE2B-SYNC-', 'latin1');
const SYNC_END = Buffer.from('\x1f\x00', 'latin1');
const HOOK = Symbol.for('sandboxd.driver');
const DISPLAY = Symbol.for('Jupyter.display');
const MIME_FIELDS = {
  'text/plain': 'text',
  'text/html': 'html',
  'text/markdown': 'markdown',
  'image/svg+xml': 'svg',
  'image/png': 'png',
  'image/jpeg': 'jpeg',
  'application/pdf': 'pdf',
  'text/latex': 'latex',
  'application/json': 'json',
  'application/javascript': 'javascript',
};
const TS_MISSING =
  'TypeScript needs Node >= 22.13 (module.stripTypeScriptTypes) or the `typescript` npm package ' +
  `in the sandbox image (this is Node ${process.versions.node}; install one, e.g. ` +
  '`npm install -g typescript`)';

const eventFd = Number(process.argv[2]);
const token = process.argv[3] || '';
const language = process.argv[4] || 'javascript';
const syncPrefix = Buffer.concat([SYNC_START, Buffer.from(`${token}-`, 'ascii')]);
let seq = 0;
let executionCount = 0;
let current = null; // the running cell: {settle(outcome)}
let stripTypes = null; // (code) => code, found on first TypeScript cell

function writeAll(fd, data) {
  let offset = 0;
  while (offset < data.length) {
    try {
      offset += fs.writeSync(fd, data, offset);
    } catch (error) {
      if (error.code !== 'EAGAIN') throw error;
    }
  }
}

function fit(message) {
  const fitted = {};
  for (const [key, value] of Object.entries(message)) {
    if (typeof value === 'string' && value.length > MAX_FIELD_CHARS) {
      const cut = value.length - MAX_FIELD_CHARS;
      fitted[key] = `${value.slice(0, MAX_FIELD_CHARS)}\n[... ${cut} characters cut]`;
    } else if (value && typeof value === 'object' && JSON.stringify(value).length > MAX_FRAME / 4) {
      continue;
    } else {
      fitted[key] = value;
    }
  }
  return fitted;
}

function send(message) {
  seq += 1;
  const marker = Buffer.concat([syncPrefix, Buffer.from(String(seq), 'ascii'), SYNC_END]);
  const streams = [];
  for (const [fd, name] of [[1, 'stdout'], [2, 'stderr']]) {
    try {
      writeAll(fd, marker);
      streams.push(name);
    } catch {
      // user code closed the descriptor
    }
  }
  let body = Buffer.from(JSON.stringify({ ...message, seq, streams }), 'utf8');
  if (body.length > MAX_FRAME) {
    body = Buffer.from(JSON.stringify({ ...fit(message), seq, streams }), 'utf8');
  }
  const header = Buffer.alloc(4);
  header.writeUInt32BE(body.length);
  writeAll(eventFd, Buffer.concat([header, body]));
}

// --- values and errors -----------------------------------------------------------------------

function formatResult(value, isMainResult) {
  const result = { t: 'result', is_main_result: isMainResult };
  let bundle = null;
  try {
    if (value !== null && (typeof value === 'object' || typeof value === 'function')) {
      if (typeof value[DISPLAY] === 'function') bundle = value[DISPLAY]();
    }
  } catch {
    bundle = null;
  }
  if (bundle && typeof bundle === 'object') {
    const extra = {};
    for (const [mime, data] of Object.entries(bundle)) {
      const field = MIME_FIELDS[mime];
      if (field === 'json') result.json = typeof data === 'object' && data !== null ? data : { value: data };
      else if (field) result[field] = typeof data === 'string' ? data : JSON.stringify(data);
      else extra[mime] = data;
    }
    if (Object.keys(extra).length) result.extra = extra;
  }
  if (result.text === undefined) {
    result.text = typeof value === 'string' ? value : safeInspect(value);
  }
  return result;
}

function safeInspect(value) {
  try {
    return util.inspect(value, { depth: 4, maxArrayLength: 200, maxStringLength: 100000 });
  } catch (error) {
    return `<inspect failed: ${error}>`;
  }
}

function cleanStack(stack) {
  // Drop the driver's own frames (everything from the inspector call down).
  const lines = String(stack).split('\n');
  const kept = [];
  for (const line of lines) {
    if (/^\s+at /.test(line) && (line.includes('node:inspector') || line.includes(__filename))) break;
    kept.push(line);
  }
  return kept.join('\n');
}

function errorEvent(thrown) {
  if (thrown instanceof Error || (thrown && typeof thrown === 'object' && 'stack' in thrown)) {
    let name = 'Error';
    let value = '';
    try {
      name = String(thrown.name || thrown.constructor?.name || 'Error');
      value = String(thrown.message ?? '');
    } catch {
      // a hostile getter
    }
    let traceback = '';
    try {
      traceback = cleanStack(thrown.stack || `${name}: ${value}`);
    } catch {
      traceback = `${name}: ${value}`;
    }
    return { t: 'error', name, value, traceback };
  }
  const text = safeInspect(thrown);
  return { t: 'error', name: 'Error', value: text, traceback: `Uncaught ${text}` };
}

// --- evaluation --------------------------------------------------------------------------------

const session = new inspector.Session();
session.connect();

function post(method, params) {
  return new Promise((resolve, reject) => {
    session.post(method, params, (error, result) => (error ? reject(error) : resolve(result)));
  });
}

// The value behind an inspector RemoteObject, fetched into this realm.
async function valueOf(remote) {
  if (!remote) return undefined;
  if ('value' in remote) return remote.value;
  if (remote.type === 'undefined') return undefined;
  if (remote.unserializableValue !== undefined) {
    const u = remote.unserializableValue;
    if (u.endsWith('n')) return BigInt(u.slice(0, -1));
    return Number(u);
  }
  if (!remote.objectId) return undefined;
  let captured;
  globalThis[HOOK].capture = (v) => {
    captured = v;
  };
  await post('Runtime.callFunctionOn', {
    objectId: remote.objectId,
    functionDeclaration: 'function () { globalThis[Symbol.for("sandboxd.driver")].capture(this); }',
    objectGroup: 'cell',
  });
  globalThis[HOOK].capture = null;
  return captured;
}

function findTypeScript() {
  if (typeof Module.stripTypeScriptTypes === 'function') {
    return (code) => Module.stripTypeScriptTypes(code, { mode: 'transform' });
  }
  const loaders = [() => Module.createRequire(path.join(process.cwd(), 'noop.js'))('typescript')];
  const globalDirs = [
    path.join(path.dirname(process.execPath), '..', 'lib', 'node_modules'),
    '/usr/local/lib/node_modules',
    '/usr/lib/node_modules',
  ];
  for (const dir of globalDirs) loaders.push(() => require(path.join(dir, 'typescript')));
  for (const load of loaders) {
    let ts;
    try {
      ts = load();
    } catch {
      continue;
    }
    return (code) => {
      const output = ts.transpileModule(code, {
        compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, sourceMap: false },
        fileName: 'cell.ts',
        reportDiagnostics: true,
      });
      const errors = (output.diagnostics || []).filter((d) => d.category === ts.DiagnosticCategory.Error);
      if (errors.length) {
        const lines = errors.map((d) => {
          const where = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : null;
          const at = where ? `(${where.line + 1},${where.character + 1}): ` : '';
          return `${at}TS${d.code}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
        });
        const error = new SyntaxError(lines[0]);
        error.stack = `SyntaxError: ${lines.join('\n')}`;
        throw error;
      }
      return output.outputText;
    };
  }
  return null;
}

// `import x from "m"` and friends become dynamic imports (REPL scripts are not modules).
function rewriteImports(code) {
  const from = String.raw`\s*from\s*(['"][^'"\n]+['"])[ \t]*;?`;
  return code
    .replace(new RegExp(String.raw`((?:^|;)\s*)import\s+\*\s+as\s+([\w$]+)${from}`, 'gm'), '$1const $2 = await import($3);')
    .replace(
      new RegExp(String.raw`((?:^|;)\s*)import\s+([\w$]+)\s*,\s*\{([^}]*)\}${from}`, 'gm'),
      (_, indent, name, names, spec) => `${indent}const {default: ${name}, ${renames(names)}} = await import(${spec});`,
    )
    .replace(
      new RegExp(String.raw`((?:^|;)\s*)import\s+\{([^}]*)\}${from}`, 'gm'),
      (_, indent, names, spec) => `${indent}const {${renames(names)}} = await import(${spec});`,
    )
    .replace(
      new RegExp(String.raw`((?:^|;)\s*)import\s+([\w$]+)${from}`, 'gm'),
      (_, indent, name, spec) => `${indent}const ${name} = __sandboxd_default(await import(${spec}));`,
    )
    .replace(new RegExp(String.raw`((?:^|;)\s*)import\s*(['"][^'"\n]+['"])[ \t]*;?`, 'gm'), '$1await import($2);')
    .replace(/(?<![\w$.])import\s*\(/g, '__sandboxd_import(');
}

function renames(names) {
  return names
    .split(',')
    .map((n) => n.trim())
    .filter((n) => n && !n.startsWith('type '))
    .map((n) => n.replace(/\s+as\s+/, ': '))
    .join(', ');
}

async function importFrom(specifier) {
  const spec = String(specifier);
  let target = spec;
  if (spec.startsWith('.') || spec.startsWith('/')) {
    target = url.pathToFileURL(path.resolve(process.cwd(), spec)).href;
  } else if (!spec.startsWith('node:') && !Module.isBuiltin(spec) && !/^[a-z]+:/.test(spec)) {
    try {
      target = url.pathToFileURL(Module.createRequire(path.join(process.cwd(), 'noop.js')).resolve(spec)).href;
    } catch {
      target = spec; // maybe ESM-only: let import() try
    }
  }
  return import(target);
}

function defaultOf(namespace) {
  return namespace && 'default' in namespace ? namespace.default : namespace;
}

function evaluate(source) {
  return new Promise((resolve) => {
    let settled = false;
    const settle = (outcome) => {
      if (!settled) {
        settled = true;
        current = null;
        resolve(outcome);
      }
    };
    current = { settle };
    globalThis[HOOK].run = () => {
      session.post(
        'Runtime.evaluate',
        { expression: source, replMode: true, awaitPromise: true, objectGroup: 'cell' },
        (error, response) => settle({ error, response }),
      );
    };
    try {
      vm.runInThisContext('globalThis[Symbol.for("sandboxd.driver")].run()', {
        breakOnSigint: true,
        filename: 'sandboxd-driver',
      });
    } catch (error) {
      settle({ interrupted: true, reason: String(error && error.message) });
    }
  });
}

async function runCell(code) {
  let source = code;
  if (language === 'typescript') {
    if (stripTypes === null) stripTypes = findTypeScript() || false;
    if (!stripTypes) {
      send({ t: 'error', name: 'TypeScriptUnavailable', value: TS_MISSING, traceback: TS_MISSING });
      return;
    }
    try {
      source = stripTypes(code);
    } catch (error) {
      send(errorEvent(error));
      return;
    }
  }
  source = rewriteImports(source);
  const outcome = await evaluate(source);
  try {
    if (outcome.interrupted) {
      send({
        t: 'error',
        name: 'Interrupted',
        value: 'Execution interrupted',
        traceback: `Interrupted: ${outcome.reason || 'SIGINT'}`,
      });
      return;
    }
    if (outcome.error) {
      send({ t: 'error', name: 'InternalError', value: String(outcome.error.message || outcome.error), traceback: '' });
      return;
    }
    const { result, exceptionDetails } = outcome.response;
    if (exceptionDetails) {
      send(errorEvent(await valueOf(exceptionDetails.exception || result)));
      return;
    }
    const value = await valueOf(result);
    if (value !== undefined) send(formatResult(value, true));
  } finally {
    session.post('Runtime.releaseObjectGroup', { objectGroup: 'cell' });
  }
}

async function handle(command) {
  if (command.op === 'ping') {
    send({ t: 'pong' });
    return;
  }
  if (command.op !== 'execute') {
    send({ t: 'done', bad_command: String(command.op) });
    return;
  }
  Object.assign(process.env, command.base_env || {});
  const env = command.env || {};
  executionCount += 1;
  send({ t: 'count', n: executionCount });
  const saved = {};
  for (const key of Object.keys(env)) saved[key] = process.env[key];
  try {
    Object.assign(process.env, env);
    await runCell(String(command.code ?? ''));
  } catch (error) {
    send(errorEvent(error));
  } finally {
    for (const [key, old] of Object.entries(saved)) {
      if (old === undefined) delete process.env[key];
      else process.env[key] = old;
    }
    send({ t: 'done' });
  }
}

// --- start -------------------------------------------------------------------------------------

function main() {
  globalThis[HOOK] = { run: null, capture: null };
  const hidden = (name, value) =>
    Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
  hidden('__sandboxd_import', importFrom);
  hidden('__sandboxd_default', defaultOf);
  hidden('require', Module.createRequire(path.join(process.cwd(), '<repl>')));
  hidden('display', (...values) => {
    for (const value of values) send(formatResult(value, false));
  });
  process.on('SIGINT', () => {
    if (current) current.settle({ interrupted: true, reason: 'SIGINT while the cell awaited' });
  });
  // Like the Node REPL: an error in a callback is reported, and the context lives on.
  process.on('uncaughtException', (error) => {
    process.stderr.write(`Uncaught ${cleanStack(error && error.stack ? error.stack : safeInspect(error))}\n`);
  });
  process.on('unhandledRejection', (reason) => {
    process.stderr.write(`Unhandled rejection: ${cleanStack(reason && reason.stack ? reason.stack : safeInspect(reason))}\n`);
  });

  const queue = [];
  let busy = false;
  let pending = Buffer.alloc(0);
  const pump = async () => {
    if (busy) return;
    busy = true;
    while (queue.length) await handle(queue.shift());
    busy = false;
  };
  process.stdin.on('data', (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    while (pending.length >= 4) {
      const size = pending.readUInt32BE(0);
      if (size > MAX_FRAME) {
        process.stderr.write(`sandboxd driver: frame of ${size} bytes exceeds the limit\n`);
        process.exit(70);
      }
      if (pending.length < 4 + size) break;
      const body = pending.subarray(4, 4 + size).toString('utf8');
      pending = pending.subarray(4 + size);
      queue.push(JSON.parse(body));
    }
    pump();
  });
  process.stdin.on('end', () => process.exit(0));
  send({ t: 'ready', pid: process.pid, cwd: process.cwd(), node: process.versions.node });
}

main();
