package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/job"
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

// loadConfig loads a config file and checks that this build can run it.
// Every error it returns is a config error (exit 2), one problem per line.
func loadConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	if _, err := job.New(cfg, job.Options{}); err != nil {
		if !errors.Is(err, job.ErrUnsupported) {
			return nil, err
		}
		// One line per problem, located like the loader's: FILE: field: msg.
		lines := strings.Split(err.Error(), "\n")[1:]
		for i, l := range lines {
			lines[i] = fmt.Sprintf("%s: %s (not supported by this version)", path, l)
		}
		return nil, &unsupportedError{msg: strings.Join(lines, "\n"), err: err}
	}
	return cfg, nil
}

type unsupportedError struct {
	msg string
	err error
}

func (e *unsupportedError) Error() string { return e.msg }
func (e *unsupportedError) Unwrap() error { return e.err }
