// Package worker is slotcron's runtime as a program: the YAML config and its
// validation, the Redis client (single, Sentinel, Cluster or embedded), the
// OpenTelemetry exporters, the HTTP endpoints (/healthz, /readyz, /metrics)
// and the signals of a graceful stop. cmd/worker is Main with the lottery
// registered; a program with jobs of its own calls Main with its Registrar.
//
// It is the only package that configures exporters; the libraries
// (scheduler, slotstore, locking) take providers and a logger as options.
//
//	func main() {
//		worker.Main(func(reg *jobs.Registry, env worker.Env) error {
//			return reg.Register("invoice-run", sendInvoices)
//		})
//	}
//
// # Commands
//
//	worker [run] -config FILE   run the cron table until SIGTERM or SIGINT
//	worker check -config FILE   validate the config, print each job's next 3 slots
//	worker status -config FILE  print each job's lease holder and last 10 slot records
//
// # Config
//
// Load and LoadFile parse a config strictly (an unknown field is an error)
// and report every problem at once, each with its file, line and field path.
// config.example.yaml documents every field with its default.
package worker
