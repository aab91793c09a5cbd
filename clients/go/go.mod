module github.com/earmark-dev/earmark/gen/go

go 1.19

// The versions Debian 12 ships, which `make go` builds against offline in GOPATH mode
// (see the Makefile). With a module proxy, `go mod tidy` adds google.golang.org/genproto
// (Debian's is git 2020-04-13, b5235f6) and go.sum.
require (
	github.com/golang/protobuf v1.5.2
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)
