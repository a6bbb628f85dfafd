package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/dedupstream/dedupstream/config"
)

func cmdLint(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("lint", "lint FILE...\n\nValidate job config files: strict keys, ${VAR} interpolation, every value.\nEach problem is printed on its own line as FILE:LINE: field.path: problem.\nExit 2 if any file has a problem.", stdout, stderr)
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "dedupstream lint: no config files given")
		fs.Usage()
		return exitUsage
	}
	code := exitOK
	for _, path := range fs.Args() {
		if _, err := loadConfig(path); err != nil {
			fmt.Fprintln(stderr, err)
			code = exitUsage
			continue
		}
		fmt.Fprintf(stdout, "%s: ok\n", path)
	}
	return code
}

// loadConfig loads a config file. Every error it returns is a config error
// (exit 2), one problem per line.
func loadConfig(path string) (*config.Config, error) {
	return config.Load(path)
}

// loadJob loads the job file of run and migrate, applies --log-level (level,
// "" to keep the file's) and makes the logger; a config error is printed to
// stderr and ok is false (exit 2).
func loadJob(path, level string, stderr io.Writer) (cfg *config.Config, log *slog.Logger, ok bool) {
	cfg, err := loadConfig(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, nil, false
	}
	if level != "" {
		cfg.Log.Level = level
	}
	return cfg, newLogger(cfg.Log, stderr), true
}
