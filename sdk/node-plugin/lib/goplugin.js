'use strict';

// What hashicorp/go-plugin's host needs from a gRPC plugin that is not
// written in Go, in one place: the magic cookie, protocol version
// negotiation, AutoMTLS, the handshake line on stdout, the health and
// controller services, logging the host understands, and a clean exit when
// the host asks or goes away. It knows nothing of Hymical's transport
// service: the caller registers that through `register`.
//
// docs/plugins-other-languages.md describes each step; go-plugin's own
// server.go is the reference this follows.

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { selfSignedCert } = require('./cert');

// go-plugin's core protocol: the first field of the handshake line. It has
// been 1 since go-plugin began; a host refuses any other.
const CORE_PROTOCOL_VERSION = 1;

// How long Shutdown waits for calls in flight before it ends them.
const SHUTDOWN_GRACE_MS = 1000;

// How often the plugin checks that the process that started it is still
// its parent. A host killed with SIGKILL cannot stop its plugins; the
// plugin is then re-parented, and exits. (On Linux the Hymical host also
// has the kernel kill its plugins when it dies; this covers the rest.)
const PARENT_CHECK_MS = 1000;

// loadProto loads one of the .proto files beside this package with the
// options every service here uses: field names as written (snake_case),
// enums as their names, 64-bit integers as decimal strings (a stream id is
// a uint64), and every field present with its default.
function loadProto(file) {
  return grpc.loadPackageDefinition(protoLoader.loadSync(path.join(__dirname, '..', 'proto', file), {
    keepCase: true,
    enums: String,
    longs: String,
    defaults: true,
    oneofs: true,
  }));
}

// hclogLine is one log line in the JSON form go-plugin's host parses from a
// plugin's stderr (hclog's JSON format): @level, @message and @timestamp,
// and the remaining keys as the entry's fields. A line that is not such
// JSON is still kept, but only at the host's debug level.
function hclogLine(level, message, fields) {
  // go-plugin parses @timestamp with microseconds; Date has milliseconds.
  const timestamp = new Date().toISOString().replace(/Z$/, '000Z');
  return JSON.stringify({ ...fields, '@level': level, '@message': message, '@timestamp': timestamp }) + '\n';
}

// newLogger logs to stderr in that form. Never log a message's headers or
// body: the headers carry its signature.
function newLogger(stream = process.stderr) {
  const log = (level) => (message, fields = {}) => stream.write(hclogLine(level, message, fields));
  return { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') };
}

// negotiate picks the protocol version to speak, as go-plugin does: the
// newest version both the host (PLUGIN_PROTOCOL_VERSIONS, a comma-separated
// list) and the plugin speak. With no common version it answers its oldest,
// and the host then refuses the plugin with a message naming both sides.
function negotiate(hostList, ours) {
  const host = new Set((hostList || '').split(',').map((s) => Number.parseInt(s.trim(), 10)).filter(Number.isInteger));
  const sorted = [...ours].sort((a, b) => b - a);
  const common = sorted.find((v) => host.has(v));
  return { version: common ?? sorted[sorted.length - 1], agreed: common !== undefined };
}

// portRange is where the plugin may listen: PLUGIN_MIN_PORT to
// PLUGIN_MAX_PORT when the host sets them (0 means no bound), else any port
// the system picks.
function portRange(env) {
  const min = Number.parseInt(env.PLUGIN_MIN_PORT || '0', 10) || 0;
  const max = Number.parseInt(env.PLUGIN_MAX_PORT || '0', 10) || 0;
  if (min === 0 && max === 0) return [0];
  if (min === 0 || max === 0 || min > max) {
    throw new Error(`PLUGIN_MIN_PORT=${env.PLUGIN_MIN_PORT} and PLUGIN_MAX_PORT=${env.PLUGIN_MAX_PORT} give no range of ports to listen on`);
  }
  return Array.from({ length: max - min + 1 }, (_, i) => min + i);
}

function bind(server, port, creds) {
  return new Promise((resolve, reject) => {
    server.bindAsync(`127.0.0.1:${port}`, creds, (err, bound) => (err ? reject(err) : resolve(bound)));
  });
}

async function listen(server, creds, ports) {
  let last;
  for (const port of ports) {
    try {
      return await bind(server, port, creds);
    } catch (err) {
      last = err;
    }
  }
  throw new Error(`could not listen on 127.0.0.1 in ports ${ports[0]}-${ports[ports.length - 1]}: ${last && last.message}`);
}

// serve runs a go-plugin gRPC plugin and returns once it is serving; the
// process exits when the host stops it.
//
//   cookie:   { key, value } the host sets in the environment
//   versions: the protocol versions the plugin speaks
//   register: (server, version, log) => adds the plugin's own services
//   name:     the executable's name, for the message shown when run by hand
//   onStop:   () => void, called once before the process exits
async function serve({ cookie, versions, register, name, onStop = () => {}, env = process.env, log = newLogger() }) {
  // 1. The magic cookie: not security (the host's SHA-256 pin and the
  // mutual TLS are), only a way to tell a person who ran the binary what
  // it is, rather than leave it waiting for a handshake nobody sends.
  if (env[cookie.key] !== cookie.value) {
    process.stderr.write(
      `${name} is a Hymical transport plugin: the Hymical server starts it, it is not meant to be run by hand.\n` +
      `Install it in the server's plugin directory (plugins.dir) under its name, hymical-plugin-<transport>, and run \`hymical serve\`.\n`,
    );
    process.exit(1);
  }

  // 2. The version: the newest the host and the plugin both speak.
  const { version, agreed } = negotiate(env.PLUGIN_PROTOCOL_VERSIONS, versions);
  if (!agreed) {
    log.error('the host speaks none of this plugin\'s protocol versions; it will refuse the plugin', {
      host_versions: env.PLUGIN_PROTOCOL_VERSIONS || '', plugin_versions: versions.join(','),
    });
  }

  // 3. AutoMTLS: the host passes its client certificate (PEM) and trusts
  // only the certificate this plugin answers with in the handshake line.
  // Serving without it would let any local process drive the plugin, so
  // the plugin refuses: a Hymical host always sets it.
  const clientCertPEM = env.PLUGIN_CLIENT_CERT;
  if (!clientCertPEM) {
    log.error('PLUGIN_CLIENT_CERT is not set: this plugin serves only over the mutual TLS a Hymical host sets up (go-plugin AutoMTLS)');
    process.exit(1);
  }
  const cert = selfSignedCert();
  // Require a client certificate, and accept only one that chains to the
  // host's own (it is self-signed, so only that certificate itself).
  const creds = grpc.ServerCredentials.createSsl(
    Buffer.from(clientCertPEM),
    [{ private_key: Buffer.from(cert.keyPEM), cert_chain: Buffer.from(cert.certPEM) }],
    true,
  );

  const server = new grpc.Server({
    // Messages are bounded by the host, not here (go-plugin allows up to
    // 2 GiB); 64 MiB is far above any body the server accepts.
    'grpc.max_receive_message_length': 64 << 20,
    'grpc.max_send_message_length': 64 << 20,
  });

  let stopping = false;
  const stop = (why) => {
    if (stopping) return;
    stopping = true;
    log.info('stopping', { reason: why });
    try {
      onStop();
    } catch (err) {
      log.error('stopping the transport', { error: String(err && err.message) });
    }
    const timer = setTimeout(() => server.forceShutdown(), SHUTDOWN_GRACE_MS);
    server.tryShutdown(() => {
      clearTimeout(timer);
      process.exit(0);
    });
    // tryShutdown's callback waits for every call to end; forceShutdown
    // ends them, and the exit follows.
    setTimeout(() => process.exit(0), SHUTDOWN_GRACE_MS + 500);
  };

  // 4. The services go-plugin's host calls on any gRPC plugin.
  const health = loadProto('health.proto').grpc.health.v1;
  server.addService(health.Health.service, {
    // go-plugin asks for "plugin"; the empty name means the whole server.
    Check: (call, cb) => {
      const svc = call.request.service;
      if (svc === '' || svc === 'plugin') return cb(null, { status: stopping ? 'NOT_SERVING' : 'SERVING' });
      return cb({ code: grpc.status.NOT_FOUND, details: `unknown service ${svc}` });
    },
    Watch: (call) => {
      call.write({ status: 'SERVING' });
      call.on('cancelled', () => call.end());
    },
  });
  const goplugin = loadProto('goplugin.proto').plugin;
  server.addService(goplugin.GRPCController.service, {
    // The host's graceful stop: answer, then exit. The host waits two
    // seconds for the exit before it kills the process.
    Shutdown: (call, cb) => {
      cb(null, {});
      setImmediate(() => stop('the host asked the plugin to shut down'));
    },
  });
  register(server, version, log);

  let port;
  try {
    port = await listen(server, creds, portRange(env));
  } catch (err) {
    log.error('cannot listen', { error: err.message });
    process.exit(1);
  }

  // 5. The handshake line, the only thing the plugin may write to stdout:
  // CORE|APP|NETWORK|ADDRESS|PROTOCOL|CERT, the certificate as its DER in
  // base64 without padding (Go's base64.RawStdEncoding, which rejects "=").
  const certField = cert.der.toString('base64').replace(/=+$/, '');
  process.stdout.write(`${CORE_PROTOCOL_VERSION}|${version}|tcp|127.0.0.1:${port}|grpc|${certField}\n`);

  // 6. Exit when the host goes away. The host gives the plugin no stdin
  // (it is /dev/null, at EOF from the start), so stdin cannot tell; the
  // parent process id can.
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) stop('the host process is gone');
  }, PARENT_CHECK_MS).unref();
  process.on('SIGTERM', () => stop('SIGTERM'));
  // As go-plugin's Go plugins do: a Ctrl-C in a terminal reaches every
  // process of the foreground group, and the host decides when its
  // plugins stop, not the keyboard.
  process.on('SIGINT', () => log.debug('ignoring SIGINT: the host stops its plugins'));

  log.debug('serving', { protocol: version, address: `127.0.0.1:${port}` });
  return { server, version, port, log };
}

module.exports = { serve, negotiate, newLogger, hclogLine, loadProto, CORE_PROTOCOL_VERSION };
