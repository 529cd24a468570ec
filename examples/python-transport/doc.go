// Package pythontransport holds the tests of the Python transport plugin
// beside it (hymical-plugin-jsonl-python), written on Debian's
// python3-grpcio, python3-protobuf and python3-cryptography with no Go.
// The tests run it as the server's plugin host runs any plugin (a real
// process, go-plugin's handshake, mutual TLS) and hold it to `hymical
// plugins check`. See README.md.
package pythontransport
