module github.com/omst-project/omst/testplans/sync

go 1.26.0

require (
	github.com/testground/sync-service v0.1.0
	go.uber.org/zap v1.28.0
)

require (
	github.com/hashicorp/errwrap v1.0.0 // indirect
	github.com/hashicorp/go-multierror v1.1.0 // indirect
	github.com/klauspost/compress v1.10.3 // indirect
	github.com/testground/testground v0.5.3 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	nhooyr.io/websocket v1.8.6 // indirect
)
