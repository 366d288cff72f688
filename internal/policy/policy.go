// Package policy decides whether an agent's tool call may run: allow, deny
// or require a person's approval. It is the engine behind README.md's
// "What is checked before a call runs".
//
// A Config (rules, limits, risk defaults) is compiled once into an immutable
// Policy; Policy.Decide then judges one call (principal, tool, arguments,
// task) and Policy.Visible says whether a tool should be listed at all.
// Decide runs these checks in order and the first that fails decides:
//
//  1. allowlist: the task's AllowTools globs (path.Match over the exposed
//     name "server__tool"); no globs means no tools; a malformed glob denies.
//  2. permission: the principal holds every permission the manifest
//     requires. A held permission grants itself, "*" grants everything and
//     "prefix.*" grants every permission starting with "prefix." (so
//     "filesystem.*" grants "filesystem.write" and "filesystem.write.tmp",
//     but not "filesystem" nor "filesystemx.read").
//  3. data_level: the principal's level is at least the tool's, in the order
//     public < internal < confidential < sensitive < restricted; an unknown
//     or empty level on either side denies.
//  4. size and json: the arguments are at most MaxArgBytes and are a JSON
//     object. Empty arguments and JSON null mean "no arguments", {}.
//  5. schema: the arguments validate against the tool's input schema (when
//     it has one). A schema that cannot be resolved denies.
//  6. path: every argument the manifest lists in path_args (a string or a
//     list of strings) is an absolute path that, after cleaning and
//     resolving symlinks, lies inside one of the tool's PathRoots. Relative
//     paths are refused, not resolved: the upstream resolves them against
//     its own working directory, which the policy cannot know. A tool with
//     path_args but no PathRoots is denied (a misconfiguration).
//  7. rule: the configured CEL rules in order; the first whose condition is
//     true decides. A rule that fails to evaluate denies.
//  8. default: the effect configured for the tool's risk tier.
//
// Rule conditions are CEL expressions that must be of type bool, over:
//
//	principal  {name, roles, permissions, data_level, slack_user_id}
//	tool       {name, server, upstream, side_effects, data_access_level,
//	            required_permissions, risk, idempotent, covered}
//	args       the decoded arguments, map(string, dyn); JSON numbers are doubles
//	task       {id, calls, elapsed_seconds}
//
// Fields of principal, tool and task are checked when the rule compiles, so
// a misspelt field is a compile error. A missing key of args is an
// evaluation error, which denies the call: guard optional arguments with
// has(args.mode) or args.?mode.orValue(""). Numbers of different types
// compare (task.elapsed_seconds > 60). Each evaluation is bounded by a CEL
// cost limit, and the comprehensions of a decision by a short timeout. The
// limit is checked before evaluation for a rule whose worst-case cost is
// within it given the sizes of the call's values, and counted during
// evaluation otherwise (see cost.go). Rules that can match only some tools
// (their condition starts with a test of tool.name) are skipped for other
// tools, which decides exactly as evaluating them would (see index.go).
//
// A rule about files names them with paths(tool, args): the strings of
// the arguments in the manifest's path_args (tool.path_args) and of any
// argument named path, paths, source or destination, a list's elements
// each (rulepaths.go), so one condition such as
// paths(tool, args).exists(p, p.endsWith(".env")) holds for every tool.
//
// A tool no manifest covers (Tool.Decl == nil) is treated as writing,
// high-risk and restricted. Every verdict (api.Verdict) names the check
// that decided, carries a reason written for the model (what failed and what
// would allow the call) and the policy Version, so the workflow history
// records which policy decided.
//
// Approval groups: a require_approval decision needs an approver group. It
// comes from the rule's group, else the tool manifest's approval.group, else
// Config.ApprovalGroup; when there is none the call is denied (fail closed)
// with a reason naming the missing setting. The quorum is the rule's (when
// set), else the manifest's when its group is used, else 1.
//
// Decide is deterministic: the same Input gives the same verdict, with
// three exceptions. Path confinement reads the filesystem to resolve
// symlinks (so a symlink changed between two calls changes the answer, and
// the filesystem may change between the decision and the upstream's use of
// the path: confinement here is a second fence, not a sandbox). A rule that
// runs into the evaluation timeout rather than the cost limit depends on
// the machine's speed. And when arguments fail an input schema in several
// places at once, the reason names one failure, chosen deterministically
// for the flat object schemas MCP tools use but not inside nested values or
// combinators (see validateArgs). Decide never panics: any internal failure
// becomes a deny with Check "error".
//
// This package is a leaf: it returns values and errors, never logs and never
// touches the network. It imports api (whose Effect, Check* names,
// Principal and Verdict are its vocabulary: the workflow records them),
// manifests, cel-go and jsonschema-go; nothing from MCP or the services,
// and of Temporal only what api carries (its error and enum types).
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"cel.dev/cel-go/common/types"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// Task is the unit of work the call belongs to.
type Task struct {
	ID string
	// Calls counts the task's calls before this one.
	Calls   int
	Elapsed time.Duration
	// AllowTools are globs (path.Match) over exposed tool names, such as
	// "filesystem__read_*". Empty allows no tool.
	AllowTools []string
	// Labels are the task's information-flow labels before this call
	// (nil: the task keeps none, and rules see none raised).
	Labels *api.Labels
}

// Tool is the tool being called.
type Tool struct {
	// Name is the exposed name, "server__tool".
	Name     string
	Server   string
	Upstream string
	// Decl is the manifest's declaration; nil means no manifest covers the
	// tool, which is treated as side_effects [write], risk high and data
	// access level restricted.
	Decl *manifests.Tool
	// InputSchema is the tool's JSON schema for its arguments; empty skips
	// the schema check.
	InputSchema json.RawMessage
	// PathRoots are the directories Decl.PathArgs must stay inside.
	PathRoots []string
}

// Rule is one policy rule: when When (a CEL expression, see the package
// documentation of the variables) is true, Effect decides the call.
type Rule struct {
	Name   string     `yaml:"name" json:"name"`
	When   string     `yaml:"when" json:"when"`
	Effect api.Effect `yaml:"effect" json:"effect"`
	// Group and Quorum apply to require_approval only. Group empty means the
	// tool manifest's approval group (then Config.ApprovalGroup); Quorum 0
	// means the manifest's quorum when its group is used, else 1.
	Group  string `yaml:"group,omitempty" json:"group,omitempty"`
	Quorum int    `yaml:"quorum,omitempty" json:"quorum,omitempty"`
	// Reason is shown to the model; it should say what would allow the
	// call.
	Reason string `yaml:"reason,omitempty" json:"reason,omitempty"`
}

// DefaultMaxArgBytes bounds the size of a call's arguments when
// Config.MaxArgBytes is 0.
const DefaultMaxArgBytes = 256 << 10

// MaxArgBytesLimit is the most Config.MaxArgBytes may be: arguments are
// kept in the task's workflow history, where one payload may not exceed
// 2 MB.
const MaxArgBytesLimit = 1 << 20

// Config is the policy as written by an operator.
type Config struct {
	Rules []Rule `yaml:"rules,omitempty" json:"rules,omitempty"`
	// MaxArgBytes bounds the size of a call's arguments (0: 256 KiB).
	MaxArgBytes int `yaml:"max_arg_bytes,omitempty" json:"max_arg_bytes,omitempty"`
	// RiskDefaults is the decision when no rule matches, per risk tier.
	// Tiers left out keep the default: low and medium allow, high and
	// critical require approval.
	RiskDefaults map[manifests.Risk]api.Effect `yaml:"risk_defaults,omitempty" json:"risk_defaults,omitempty"`
	// ApprovalGroup is the approver group of last resort, for a
	// require_approval decision when neither the rule nor the tool's
	// manifest names one (e.g. tools no manifest covers).
	ApprovalGroup string `yaml:"approval_group,omitempty" json:"approval_group,omitempty"`
	// File is where the configuration came from, for error messages only
	// (it is not part of Version).
	File string `yaml:"-" json:"-"`
}

// defaultRiskEffects are the RiskDefaults a Config does not override.
var defaultRiskEffects = map[manifests.Risk]api.Effect{
	manifests.RiskLow:      api.Allow,
	manifests.RiskMedium:   api.Allow,
	manifests.RiskHigh:     api.RequireApproval,
	manifests.RiskCritical: api.RequireApproval,
}

// engineVersion is part of Version so that a change in how this package
// decides (not only a change in configuration) yields a new version.
const engineVersion = "airlock.policy/1"

// Policy is a compiled Config. It is immutable and safe for concurrent use.
type Policy struct {
	rules        []compiledRule
	index        ruleIndex
	maxArgBytes  int
	riskDefaults map[manifests.Risk]api.Effect
	approvalGrp  string
	version      string
	schemas      *schemaCache
	// adapter turns the rule variables into CEL values, once per decision.
	adapter types.Adapter
}

// RuleError is a problem with one rule of a Config.
type RuleError struct {
	File  string
	Index int
	Name  string
	Err   error
}

func (e *RuleError) Error() string {
	name := e.Name
	if name == "" {
		name = "(unnamed)"
	}
	return fmt.Sprintf("%s: rules[%d] %s: %v", e.File, e.Index, name, e.Err)
}

func (e *RuleError) Unwrap() error { return e.Err }

// Compile checks cfg and compiles its rules. It reports every problem, not
// only the first, joined with errors.Join; problems with a rule are
// *RuleError values.
func Compile(cfg Config) (*Policy, error) {
	file := cfg.File
	if file == "" {
		file = "policy"
	}
	var errs []error
	ruleErr := func(i int, name string, format string, args ...any) {
		errs = append(errs, &RuleError{File: file, Index: i, Name: name, Err: fmt.Errorf(format, args...)})
	}

	p := &Policy{
		maxArgBytes:  cfg.MaxArgBytes,
		riskDefaults: make(map[manifests.Risk]api.Effect, len(defaultRiskEffects)),
		approvalGrp:  strings.TrimSpace(cfg.ApprovalGroup),
		schemas:      newSchemaCache(),
	}
	if cfg.MaxArgBytes < 0 {
		errs = append(errs, fmt.Errorf("%s: max_arg_bytes: must not be negative, got %d; use 0 for the default (%d)", file, cfg.MaxArgBytes, DefaultMaxArgBytes))
	}
	if p.maxArgBytes <= 0 {
		p.maxArgBytes = DefaultMaxArgBytes
	}
	for r, e := range defaultRiskEffects {
		p.riskDefaults[r] = e
	}
	for _, r := range slices.Sorted(maps.Keys(cfg.RiskDefaults)) {
		e := cfg.RiskDefaults[r]
		if _, ok := defaultRiskEffects[r]; !ok {
			errs = append(errs, fmt.Errorf("%s: risk_defaults: %q is not a risk tier; use low, medium, high or critical", file, r))
			continue
		}
		if !e.Valid() {
			errs = append(errs, fmt.Errorf("%s: risk_defaults[%s]: %q is not an effect; use allow, deny or require_approval", file, r, e))
			continue
		}
		p.riskDefaults[r] = e
	}

	env, err := newEnv()
	if err != nil {
		// The environment is fixed by this package: failing here is a bug.
		return nil, fmt.Errorf("policy: building the CEL environment: %w", err)
	}
	p.adapter = env.CELTypeAdapter()
	seen := make(map[string]int, len(cfg.Rules))
	for i, r := range cfg.Rules {
		switch {
		case strings.TrimSpace(r.Name) == "":
			ruleErr(i, r.Name, "name is empty; give every rule a unique name")
		case seen[r.Name] > 0:
			ruleErr(i, r.Name, "name is already used by rules[%d]; rule names must be unique", seen[r.Name]-1)
		default:
			seen[r.Name] = i + 1
		}
		if !r.Effect.Valid() {
			ruleErr(i, r.Name, "effect %q is not an effect; use allow, deny or require_approval", r.Effect)
		}
		if r.Effect != api.RequireApproval && (r.Group != "" || r.Quorum != 0) {
			ruleErr(i, r.Name, "group and quorum apply only to require_approval rules; remove them or change the effect")
		}
		if r.Quorum < 0 {
			ruleErr(i, r.Name, "quorum must be at least 1, got %d (0 means the manifest's quorum, or 1)", r.Quorum)
		}
		if strings.TrimSpace(r.When) == "" {
			ruleErr(i, r.Name, `when is empty; write a CEL condition, e.g. when: 'tool.risk == "critical"'`)
			continue
		}
		cr, err := compileRule(env, r)
		if err != nil {
			ruleErr(i, r.Name, "%v", err)
			continue
		}
		p.rules = append(p.rules, cr)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	p.index = newRuleIndex(p.rules)
	buildChains(env, p.rules)
	p.version = version(cfg, p)
	return p, nil
}

// Version identifies the policy: the first 16 hex digits of the SHA-256 of
// a canonical encoding of the whole configuration (rules in order, effective
// limits and risk defaults, the fallback approver group) and of the engine
// version. Config.File is not part of it.
func (p *Policy) Version() string { return p.version }

// MaxArgBytes is the most bytes of arguments a call may carry.
func (p *Policy) MaxArgBytes() int { return p.maxArgBytes }

func version(cfg Config, p *Policy) string {
	type canonRule struct {
		Name   string     `json:"name"`
		When   string     `json:"when"`
		Effect api.Effect `json:"effect"`
		Group  string     `json:"group"`
		Quorum int        `json:"quorum"`
		Reason string     `json:"reason"`
	}
	canon := struct {
		Engine        string                        `json:"engine"`
		Rules         []canonRule                   `json:"rules"`
		MaxArgBytes   int                           `json:"max_arg_bytes"`
		RiskDefaults  map[manifests.Risk]api.Effect `json:"risk_defaults"` // encoding/json sorts map keys
		ApprovalGroup string                        `json:"approval_group"`
	}{
		Engine:        engineVersion,
		Rules:         make([]canonRule, 0, len(cfg.Rules)),
		MaxArgBytes:   p.maxArgBytes,
		RiskDefaults:  p.riskDefaults,
		ApprovalGroup: p.approvalGrp,
	}
	for _, r := range cfg.Rules {
		canon.Rules = append(canon.Rules, canonRule(r))
	}
	b, err := json.Marshal(canon)
	if err != nil {
		panic("policy: encoding the canonical config: " + err.Error()) // only strings and ints: cannot happen
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
