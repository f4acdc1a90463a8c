// Command omst is the testground plan for omst: a root, one head node per
// site and workers, each instance one host running its own `omst daemon`.
// Test cases: broadcast, gather, failover, churn, dht, rmprefix, smallgather, taskfarm, idle (see README.md and
// manifest.toml).
package main

import (
	"os"
	"sync/atomic"

	"github.com/testground/sdk-go/run"
	"github.com/testground/sdk-go/runtime"
)

// failed is set when the test case returns an error or panics. sdk-go
// records the outcome on the sync service but exits 0 either way; the exit
// status is what the direct launcher and the namespace harness look at.
var failed atomic.Bool

func main() {
	// testground's local:exec runner always points INFLUXDB_URL at
	// localhost:8086; sdk-go v0.3.0 does not read TEST_DISABLE_METRICS and
	// would retry the uploads for seconds at exit. Honour the flag here.
	if os.Getenv("TEST_DISABLE_METRICS") == "true" {
		os.Unsetenv("INFLUXDB_URL")
	}
	run.InvokeMap(map[string]interface{}{
		"broadcast":   testCase(broadcastCase{}),
		"gather":      testCase(gatherCase{}),
		"failover":    testCase(failoverCase{}),
		"churn":       testCase(churnCase{}),
		"dht":         testCase(dhtCase{}),
		"rmprefix":    testCase(rmprefixCase{}),
		"smallgather": testCase(smallgatherCase{}),
		"taskfarm":    testCase(&taskfarmCase{}),
		"idle":        testCase(idleCase{}),
	})
	if failed.Load() {
		os.Exit(1)
	}
}

// testCase wraps a case in the common instance life cycle (instance.go).
func testCase(c caseImpl) run.InitializedTestCaseFn {
	return func(re *runtime.RunEnv, ic *run.InitContext) (err error) {
		defer func() {
			if r := recover(); r != nil {
				failed.Store(true)
				panic(r)
			}
			if err != nil {
				failed.Store(true)
			}
		}()
		return runInstance(re, ic, c)
	}
}
