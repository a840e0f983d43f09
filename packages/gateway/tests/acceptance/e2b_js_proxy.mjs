// Preloaded (`node --import`) only for the domain-form run of e2b_js_client.mjs: Node's fetch,
// which the SDK uses, ignores HTTPS_PROXY, and the test's stand-in for wildcard DNS is a
// CONNECT proxy (kube_agent_sandbox.testing.wildcard_tunnel). undici is a dependency of `e2b`;
// its EnvHttpProxyAgent reads HTTPS_PROXY/NO_PROXY as NODE_USE_ENV_PROXY=1 does on newer Node.
import { EnvHttpProxyAgent, setGlobalDispatcher } from "undici";

setGlobalDispatcher(new EnvHttpProxyAgent());
