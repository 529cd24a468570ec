package transport

// The generated code in transportpb is committed. To regenerate it after
// changing proto/transport.proto, install the generators at the versions the
// committed code was made with and run `go generate ./sdk/transport/`:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//
// protoc itself comes from the system (Debian's protobuf-compiler, 3.21),
// which also provides google/protobuf/*.proto.

//go:generate protoc --proto_path=proto --go_out=transportpb --go_opt=paths=source_relative --go-grpc_out=transportpb --go-grpc_opt=paths=source_relative transport.proto
