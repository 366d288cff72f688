package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Command is one command of the airlock command line. The table in
// commands is the whole command line, in the manner of caddy's
// cmd/commands.go: dispatch, `airlock help` and every -h are made from it.
type Command struct {
	// Name is the word that selects the command.
	Name string
	// Usage is the synopsis after "airlock NAME": the arguments, and the
	// flags worth naming. Each line is one form of the command; a line
	// that starts with a space continues the one before. In the list of
	// commands a command shows the last word of its first form.
	Usage string
	// Short is the one-line description in the lists of commands.
	Short string
	// Long is what -h says between the usage and the flags.
	Long string
	// Flags registers the command's flags on fs and returns its Run, bound
	// to their values (see bind). nil for a group of subcommands.
	Flags func(fs *flag.FlagSet) Run
	// NoArgs says the command takes flags only: a positional argument is a
	// usage error.
	NoArgs bool
	// Sub are the subcommands of a group ("tasks list").
	Sub []*Command
}

// Run runs a command once its flags are parsed and returns the exit
// status: 0 done, 1 failed, 2 a mistake in the command line.
type Run func(c *Call) int

// Call is one invocation of a command.
type Call struct {
	// Name is the command as typed, "airlock tasks show": every message
	// starts with it.
	Name string
	// Args are the positional arguments, the flags taken out.
	Args   []string
	Flags  *flag.FlagSet
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// usage reports a mistake in the command line (exit status 2).
func (c *Call) usage(format string, a ...any) int {
	fmt.Fprintf(c.Stderr, "%s: %s\n", c.Name, fmt.Sprintf(format, a...))
	return 2
}

// fail reports why the command failed (exit status 1).
func (c *Call) fail(err error) int {
	fmt.Fprintf(c.Stderr, "%s: %v\n", c.Name, err)
	return 1
}

// failOn reports why the command failed on its argument arg ("airlock
// tasks show T1: ..."), exit status 1.
func (c *Call) failOn(arg string, err error) int {
	fmt.Fprintf(c.Stderr, "%s %s: %v\n", c.Name, arg, err)
	return 1
}

// given reports whether the flag name was on the command line.
func (c *Call) given(name string) bool {
	found := false
	c.Flags.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// bind makes a Command's Flags from a function that registers flags into
// an options struct (nil: none) and one that runs with it.
func bind[T any](flags func(*flag.FlagSet, *T), run func(*Call, *T) int) func(*flag.FlagSet) Run {
	return func(fs *flag.FlagSet) Run {
		o := new(T)
		if flags != nil {
			flags(fs, o)
		}
		return func(c *Call) int { return run(c, o) }
	}
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// noFlags is the options of a command without flags of its own.
type noFlags struct{}

// commands is the command line.
func commands() []*Command {
	return []*Command{
		devCommand(),
		gatewayCommand(),
		workerCommand(),
		approverCommand(),
		runCommand(),
		tasksCommand(),
		approvalsCommand(),
		manifestsCommand(),
		keysCommand(),
		credentialsCommand(),
		slackCommand(),
		schedulesCommand(),
		auditCommand(),
		benchCommand(),
		{Name: "version", Short: "print the version", Flags: bind(nil, func(c *Call, _ *noFlags) int {
			fmt.Fprintln(c.Stdout, "airlock", version)
			return 0
		})},
	}
}

const intro = "airlock: a durable, human-in-the-loop runtime for AI-agent tool calls.\n"

const startHere = `Start here:
  go run ./cmd/airlock dev     serves the example configuration (airlock.yaml)
                               at http://127.0.0.1:7400/mcp
`

// run is main without os.Exit, so tests can call it.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := &Command{Name: "airlock", Sub: commands()}
	if len(args) == 0 {
		root.writeAnyHelp(stderr, "airlock")
		return 2
	}
	switch args[0] {
	case "help", "-h", "--help":
		return root.help("airlock", args[1:], stdout, stderr)
	case "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	cmd := find(root.Sub, args[0])
	if cmd == nil {
		fmt.Fprintf(stderr, "airlock: unknown command %q\n\n", args[0])
		root.writeAnyHelp(stderr, "airlock")
		return 2
	}
	return cmd.exec("airlock "+cmd.Name, args[1:], streams{stdin, stdout, stderr})
}

type streams struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

func find(cmds []*Command, name string) *Command {
	for _, c := range cmds {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// exec runs the command (name is how it was called) or the subcommand
// args name. A group's help goes to stderr, as a command's -h does.
func (cmd *Command) exec(name string, args []string, s streams) int {
	if cmd.Flags != nil {
		return cmd.execLeaf(name, args, s)
	}
	if len(args) == 0 {
		cmd.writeGroupHelp(s.stderr, name)
		return 2
	}
	switch args[0] {
	case "-h", "--help":
		cmd.writeGroupHelp(s.stderr, name)
		return 0
	case "help":
		return cmd.help(name, args[1:], s.stderr, s.stderr)
	}
	sub := find(cmd.Sub, args[0])
	if sub == nil {
		fmt.Fprintf(s.stderr, "%s: unknown subcommand %q\n", name, args[0])
		cmd.writeGroupHelp(s.stderr, name)
		return 2
	}
	return sub.exec(name+" "+sub.Name, args[1:], s)
}

// execLeaf parses the flags, wherever they are among the arguments, and
// runs the command.
func (cmd *Command) execLeaf(name string, args []string, s streams) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(s.stderr)
	run := cmd.Flags(fs)
	fs.Usage = func() { cmd.writeHelp(s.stderr, name, fs) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if cmd.NoArgs && len(pos) > 0 {
		fmt.Fprintf(s.stderr, "%s: unexpected argument %q (flags only; see %s -h)\n", name, pos[0], name)
		return 2
	}
	return run(&Call{Name: name, Args: pos, Flags: fs, Stdin: s.stdin, Stdout: s.stdout, Stderr: s.stderr})
}

// help writes to w the help of the subcommand that path names ("help
// tasks list"), or of cmd itself, called name.
func (cmd *Command) help(name string, path []string, w, stderr io.Writer) int {
	for _, p := range path {
		sub := find(cmd.Sub, p)
		if sub == nil {
			fmt.Fprintf(stderr, "%s: no command %q to help with\n", name, p)
			return 2
		}
		cmd, name = sub, name+" "+sub.Name
	}
	cmd.writeAnyHelp(w, name)
	return 0
}

// writeAnyHelp writes the help of the top, a group or a command.
func (cmd *Command) writeAnyHelp(w io.Writer, name string) {
	switch {
	case name == "airlock":
		writeTopHelp(w, cmd.Sub)
	case cmd.Flags == nil:
		cmd.writeGroupHelp(w, name)
	default:
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		cmd.Flags(fs)
		cmd.writeHelp(w, name, fs)
	}
}

// parseExit is the exit code for a flag parsing error: 0 when help was
// asked for (-h, --help), 2 for a usage error (the flag package has already
// printed what is wrong and the usage).
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// parseInterspersed parses flags anywhere among the positional arguments
// ("pin memory --config x.yaml", "audit show TASK --json"); after "--"
// every argument is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if terminated(fs, args[:len(args)-len(rest)]) {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// terminated reports whether parsing stopped at "--", the end of the
// flags, rather than at a positional argument: consumed ends with a "--"
// that is not the value of the flag before it.
func terminated(fs *flag.FlagSet, consumed []string) bool {
	n := len(consumed)
	if n == 0 || consumed[n-1] != "--" {
		return false
	}
	if n == 1 {
		return true
	}
	prev := consumed[n-2]
	if !strings.HasPrefix(prev, "-") || strings.Contains(prev, "=") {
		return true
	}
	f := fs.Lookup(strings.TrimLeft(prev, "-"))
	if f == nil {
		return true
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// writeHelp is a command's -h: usage, description, flags with defaults.
func (cmd *Command) writeHelp(w io.Writer, name string, fs *flag.FlagSet) {
	forms := cmd.forms()
	for i, f := range forms {
		lead := "Usage: "
		if i > 0 {
			lead = "       "
		}
		fmt.Fprintln(w, indentForm(lead+name, f))
	}
	if len(forms) == 0 {
		fmt.Fprintf(w, "Usage: %s\n", name)
	}
	if d := firstNonEmpty(cmd.Long, cmd.Short); d != "" {
		fmt.Fprintf(w, "\n%s", strings.TrimRight(d, "\n")+"\n")
	}
	has := false
	fs.VisitAll(func(*flag.Flag) { has = true })
	if has {
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

// writeGroupHelp is a group's help: the forms of its subcommands, what
// each does, and the group's description.
func (cmd *Command) writeGroupHelp(w io.Writer, name string) {
	fmt.Fprintln(w, "Usage:")
	for _, sub := range cmd.Sub {
		forms := sub.forms()
		if len(forms) == 0 {
			forms = []string{""}
		}
		for _, f := range forms {
			fmt.Fprintln(w, indentForm("  "+name+" "+sub.Name, f))
		}
	}
	fmt.Fprintln(w)
	for _, sub := range cmd.Sub {
		fmt.Fprintln(w, listLine("  "+sub.Name, 12, sub.Short))
	}
	if cmd.Long != "" {
		fmt.Fprintf(w, "\n%s", strings.TrimRight(cmd.Long, "\n")+"\n")
	}
	fmt.Fprintf(w, "\nRun \"%s COMMAND -h\" for a command's details and flags.\n", name)
}

// writeTopHelp is the list of commands.
func writeTopHelp(w io.Writer, cmds []*Command) {
	fmt.Fprint(w, intro, "\nUsage:\n")
	for _, c := range cmds {
		fmt.Fprintln(w, listLine(fmt.Sprintf("  airlock %-10s %s", c.Name, c.synopsis()), 31, c.Short))
	}
	fmt.Fprint(w, "\nRun \"airlock COMMAND -h\" (or \"airlock help COMMAND\") for a command's flags.\n\n", startHere)
}

// synopsis is what the list of commands shows after the name: a group's
// subcommands, else the last word of the first form.
func (cmd *Command) synopsis() string {
	if cmd.Flags == nil {
		names := make([]string, len(cmd.Sub))
		for i, s := range cmd.Sub {
			names[i] = s.Name
		}
		return strings.Join(names, "|")
	}
	forms := cmd.forms()
	if len(forms) == 0 {
		return ""
	}
	words := strings.Fields(forms[0])
	return words[len(words)-1]
}

// forms are the lines of Usage with their continuations joined by "\n".
func (cmd *Command) forms() []string {
	var forms []string
	for _, l := range strings.Split(strings.TrimRight(cmd.Usage, "\n"), "\n") {
		switch {
		case strings.TrimSpace(l) == "":
		case strings.HasPrefix(l, " ") && len(forms) > 0:
			forms[len(forms)-1] += "\n" + strings.TrimSpace(l)
		default:
			forms = append(forms, l)
		}
	}
	return forms
}

// indentForm writes lead and form, continuation lines under the form's
// first word.
func indentForm(lead, form string) string {
	if form == "" {
		return lead
	}
	pad := "\n" + strings.Repeat(" ", len(lead)+1)
	return lead + " " + strings.ReplaceAll(form, "\n", pad)
}

// listLine writes head, then text from column col (on the next line when
// head reaches it), wrapped at 92 columns (the widest line of the
// list before it was generated).
func listLine(head string, col int, text string) string {
	if text == "" {
		return head
	}
	var b strings.Builder
	b.WriteString(head)
	if len(head) >= col-1 {
		b.WriteString("\n" + strings.Repeat(" ", col))
	} else {
		b.WriteString(strings.Repeat(" ", col-len(head)))
	}
	n := col
	for i, w := range strings.Fields(text) {
		if i > 0 && n+1+len(w) > 92 {
			b.WriteString("\n" + strings.Repeat(" ", col))
			n = col
		} else if i > 0 {
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
