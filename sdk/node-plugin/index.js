'use strict';

// @hymical/transport-plugin: everything a Hymical transport plugin written
// in Node.js needs besides its own send function. serve() does go-plugin's
// side (magic cookie, version negotiation, AutoMTLS, the handshake line,
// the health and controller services, hclog logs, a clean exit) and serves
// Hymical's Transport service, protocols 1 and 2, over the functions given.
//
//   const { serve, delivered, retryable } = require('@hymical/transport-plugin');
//   serve({
//     name: 'hymical-plugin-example',
//     send: async (message, { signal, log }) => delivered(200),
//   });
//
// docs/plugins-other-languages.md says what the host expects of a plugin;
// this package is that page written once, so each plugin need not copy it.

const goplugin = require('./lib/goplugin');
const transport = require('./lib/transport');

// serve starts the plugin and resolves once it is serving; the process
// exits when the host stops it. A plugin that cannot start (it was run by
// hand, or cannot listen) exits with status 1 after saying why on stderr.
//
//   name:      the executable's name, hymical-plugin-<transport>
//   send:      async (message, { signal, log }) => outcome (required)
//   validate:  async (endpoint, { log }), throws to refuse an endpoint
//   configure: async (settings, { log }), throws to refuse the settings
//   onStop:    () => void, called once before the process exits
function serve(plugin) {
  if (!plugin || typeof plugin.send !== 'function') {
    throw new TypeError('serve({ name, send }): send must be a function (message, { signal, log }) => outcome');
  }
  for (const fn of ['validate', 'configure', 'onStop']) {
    if (plugin[fn] !== undefined && typeof plugin[fn] !== 'function') {
      throw new TypeError(`serve({ ${fn} }): ${fn} must be a function when given`);
    }
  }
  const name = plugin.name || 'this program';
  return goplugin.serve({
    name,
    cookie: transport.MAGIC_COOKIE,
    versions: transport.PROTOCOL_VERSIONS,
    onStop: plugin.onStop,
    register: (server, version, log) => transport.register(server, plugin, log),
  }).catch((err) => {
    process.stderr.write(`${name}: ${err && err.stack}\n`);
    process.exit(1);
  });
}

module.exports = {
  serve,
  delivered: transport.delivered,
  retryable: transport.retryable,
  permanent: transport.permanent,
  refused: transport.refused,
  deferred: transport.deferred,
  boundError: transport.boundError,
  MAX_ERROR_BYTES: transport.MAX_ERROR_BYTES,
  PROTOCOL_VERSIONS: transport.PROTOCOL_VERSIONS,
  MAGIC_COOKIE: transport.MAGIC_COOKIE,
};
