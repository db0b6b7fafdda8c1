// Preloaded into the reference servers' HTTP transports by the tests (node --import): a server that listens on
// a port alone (all interfaces) listens on 127.0.0.1 instead, so no test server is reachable from outside.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const first = args[0];
  const portOnly = typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first));
  if (portOnly && typeof args[1] !== "string") {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
