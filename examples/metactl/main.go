package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], env{fs: vfs.Default, stdout: os.Stdout, stderr: os.Stderr})
	stop()
	os.Exit(code)
}

// env is what a command runs against: tests pass an in-memory filesystem
// and buffers.
type env struct {
	fs     vfs.FS
	stdout io.Writer
	stderr io.Writer
}

// Exit codes.
const (
	exitOK      = 0
	exitProblem = 1
	exitUsage   = 2
)

// errUsage marks a command line that is wrong (exit 2).
var errUsage = errors.New("usage")

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

const usage = `usage:
  metactl image status FILE|DIR
  metactl image verify FILE
  metactl image dump FILE
  metactl journal status DIR
  metactl journal entries DIR [-from N] [-to M]
  metactl check [-dedupe-window N] DIR
  metactl backup -from HOST:PORT -out FILE [-token T] [-tls-cert F -tls-key F -tls-ca F]
  metactl restore -image FILE -dir DIR -id N -addr HOST:PORT [-token T]
`

// run runs one command and returns its exit code.
func run(ctx context.Context, args []string, e env) int {
	err := dispatch(ctx, args, e)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(e.stderr, usage)
		return exitUsage
	case errors.Is(err, errUsage):
		fmt.Fprintf(e.stderr, "metactl: %v\n%s", err, usage)
		return exitUsage
	case errors.Is(err, errProblems):
		return exitProblem // each problem is on stderr already
	default:
		fmt.Fprintf(e.stderr, "metactl: %v\n", err)
		return exitProblem
	}
}

func dispatch(ctx context.Context, args []string, e env) error {
	if len(args) == 0 {
		return usageErr("no command")
	}
	sub := func() (string, []string, error) {
		if len(args) < 2 {
			return "", nil, usageErr("%s needs a subcommand", args[0])
		}
		return args[1], args[2:], nil
	}
	switch args[0] {
	case "image":
		name, rest, err := sub()
		if err != nil {
			return err
		}
		switch name {
		case "status":
			return imageStatus(rest, e)
		case "verify":
			return imageVerify(rest, e)
		case "dump":
			return imageDump(rest, e)
		}
		return usageErr("unknown command image %s", name)
	case "journal":
		name, rest, err := sub()
		if err != nil {
			return err
		}
		switch name {
		case "status":
			return journalStatus(rest, e)
		case "entries":
			return journalEntries(rest, e)
		}
		return usageErr("unknown command journal %s", name)
	case "check":
		return check(ctx, args[1:], e)
	case "backup":
		return backup(ctx, args[1:], e)
	case "restore":
		return restore(ctx, args[1:], e)
	case "help", "-h", "-help", "--help":
		return flag.ErrHelp
	}
	return usageErr("unknown command %q", args[0])
}

// errProblems says that the problems found are reported on stderr already.
var errProblems = errors.New("problems found")

// parse parses flags and positional arguments in any order (flag stops at
// the first positional one) and checks the number of positional ones.
func parse(fs *flag.FlagSet, args []string, positional int, what string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errUsage, fs.Name(), err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != positional {
		return nil, usageErr("%s takes %s", fs.Name(), what)
	}
	return pos, nil
}
