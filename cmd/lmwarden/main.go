package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
)

// command is one subcommand: its name, a one-line summary for the usage
// text, and the function that parses its own flags and runs it.
type command struct {
	name    string
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

// register adds a subcommand; called from each subcommand file's init.
func register(name, summary string, run func(args []string) error) {
	if _, dup := commands[name]; dup {
		panic("lmwarden: subcommand registered twice: " + name)
	}
	commands[name] = command{name: name, summary: summary, run: run}
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: lmwarden <command> [flags]\n\ncommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'lmwarden <command> -h' for the flags of one command; 'lmwarden --version' for the build.\n")
}

func main() {
	os.Exit(run(os.Args[1:]))
}

// run dispatches to a subcommand and turns its error into an exit code:
// 2 for usage errors, 1 for everything else.
func run(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = []string{"version"}
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "lmwarden: unknown command %q\n\n", args[0])
		usage()
		return 2
	}
	err := cmd.run(args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errConfigProblems):
		return 1 // printed already, one a line
	case errors.Is(err, errUsage):
		fmt.Fprintf(os.Stderr, "lmwarden %s: %v\n", cmd.name, err)
		return 2
	default:
		fmt.Fprintf(os.Stderr, "lmwarden %s: %v\n", cmd.name, err)
		return 1
	}
}

// errUsage marks errors in the command line itself (wrap it with %w).
var errUsage = errors.New("usage error")
