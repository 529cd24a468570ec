// Package transportpb is the code protoc generates from
// sdk/transport/proto/transport.proto. Do not edit it by hand: change the
// .proto and run `go generate ./sdk/transport/`. Plugin authors use package
// transport, never this one directly.
package transportpb
