// Command dedupstream runs the deduplicating stream job and its tools.
//
//	dedupstream run --config FILE     run the job until SIGTERM/SIGINT
//	dedupstream lint FILE...          validate config files
//	dedupstream broker [--dir DIR]    an embedded Kafka broker for development
//	dedupstream demo                  embedded broker + workload + job + report
//	dedupstream verify --topic T      audit a topic for repeated business keys
//	dedupstream inspect --state DIR   state statistics; look a key up
//	dedupstream version               print the version
//
// Exit codes: 0 success, 1 runtime failure, 2 usage or config error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitFenced: a static instance was fenced by another instance that
	// owns one of its partitions now (or the cause was undecided and
	// kafka.on_fenced is exit); restarting it unchanged makes the two
	// fence each other in turn. Also: another producer (another job.id)
	// writes to the output (job.ErrOtherWriter).
	exitFenced = 3
)

const usage = `dedupstream deduplicates Kafka records by business key with exactly-once output.

Usage:
  dedupstream <command> [flags]

Commands:
  run      run the job from a config file until SIGTERM or SIGINT
  lint     validate config files; print every problem with file, line and field
  broker   run an embedded Kafka broker for local development
  demo     run the job on an embedded broker with a synthetic workload and check it
  verify   audit a topic (read_committed) for repeated business keys; exit 1 if any
  inspect  show a state directory's keys, Bloom front and checkpoints; look a key up
  migrate  rebuild the state for a new partition count after the topics were grown
  version  print the version

Run "dedupstream <command> --help" for the flags of a command.
Exit codes: 0 success, 1 runtime failure, 2 usage or config error.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand: it parses its own flags and returns an exit
// code.
type command func(args []string, stdout, stderr io.Writer) int

var commands = map[string]command{
	"run":     cmdRun,
	"lint":    cmdLint,
	"broker":  cmdBroker,
	"demo":    cmdDemo,
	"verify":  cmdVerify,
	"inspect": cmdInspect,
	"migrate": cmdMigrate,
	"version": cmdVersion,
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "dedupstream: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
	return cmd(args[1:], stdout, stderr)
}

// newFlags returns a flag set for a subcommand whose --help prints synopsis
// and the flags to stdout.
func newFlags(name, synopsis string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: dedupstream %s\n\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args; done reports that the caller must return code (help
// was printed, or the flags were wrong).
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return exitOK, true
	case err != nil:
		return exitUsage, true
	}
	return 0, false
}
