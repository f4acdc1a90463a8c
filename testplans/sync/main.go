// Command omst-sync is testground's sync service
// (github.com/testground/sync-service v0.1.0: in memory, no Redis) as a
// plain process on a port of one's choice, for running the omst plan
// without a testground daemon (scripts/wan-small.sh, scripts/bench-wan.sh,
// testplans/run-local.sh direct mode).
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	sync "github.com/testground/sync-service"
	"go.uber.org/zap"
)

func main() {
	port := flag.Int("port", 5050, "TCP port to listen on (all interfaces)")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	zl, err := zap.NewProduction()
	if err != nil {
		log.Fatal(err)
	}
	service, err := sync.NewDefaultService(ctx, zl.Sugar())
	if err != nil {
		log.Fatal(err)
	}
	srv, err := sync.NewServer(service, *port)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		<-ctx.Done()
		_ = service.Close()
		_ = srv.Shutdown(context.Background())
	}()
	log.Printf("sync service listening on %s", srv.Addr())
	if err := srv.Serve(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
