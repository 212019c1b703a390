// Package api is the wire schema of Corral: the agent's Connect protocol
// (proto/, generated Go under gen/) and the control-plane REST types (rest/).
//
// Regenerate the Go code after editing a .proto file with
//
//	go generate ./api
//
// which needs protoc (apt-get install protobuf-compiler) and the plugins
// protoc-gen-go and protoc-gen-connect-go on PATH or in $HOME/go/bin:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@latest
//	go install connectrpc.com/connect/cmd/protoc-gen-connect-go@latest
package api

//go:generate sh -c "PATH=\"$PATH:$(go env GOPATH)/bin\" protoc -I proto --go_out=gen --go_opt=paths=source_relative --connect-go_out=gen --connect-go_opt=paths=source_relative process/process.proto filesystem/filesystem.proto"
