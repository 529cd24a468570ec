// Package nodetransport holds the tests of the Node.js transport plugin
// beside it (hymical-plugin-jsonl-node), which is written in JavaScript on
// the Node SDK in sdk/node-plugin and involves no Go; they are that SDK's
// tests too. The tests install its npm dependencies, run it as the
// server's plugin host runs any plugin (a real process, go-plugin's
// handshake, mutual TLS) and deliver through it with a real `hymical
// serve`. See README.md.
package nodetransport
