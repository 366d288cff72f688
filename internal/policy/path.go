package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// checkPaths confines the path arguments of a call to the tool's roots. It
// returns "" when every path argument is inside a root, else the reason for
// the model.
//
// Relative paths are refused rather than resolved: the upstream resolves
// them against its own working directory (and some expand "~"), which this
// process cannot know, so any base chosen here could differ from the path
// the upstream actually opens.
func checkPaths(t Tool, pathArgs []string, args map[string]any) string {
	if len(pathArgs) == 0 {
		return ""
	}
	if len(t.PathRoots) == 0 {
		return fmt.Sprintf("denied: %s takes paths (%s) but no allowed directories are configured for it, so no path can be checked; ask an operator to configure its path roots",
			t.Name, strings.Join(pathArgs, ", "))
	}
	roots := make([]string, 0, len(t.PathRoots))
	for _, r := range t.PathRoots {
		if !filepath.IsAbs(r) {
			return fmt.Sprintf("denied: the allowed directory %q of %s is not an absolute path; ask an operator to fix its path roots", r, t.Name)
		}
		rr, err := resolvePath(filepath.Clean(r))
		if err != nil {
			return fmt.Sprintf("denied: the allowed directory %q of %s cannot be resolved (%v); ask an operator to fix its path roots", r, t.Name, err)
		}
		roots = append(roots, rr)
	}
	for _, name := range pathArgs {
		v, ok := args[name]
		if !ok || v == nil {
			continue // an absent optional path; the schema says whether it is required
		}
		switch v := v.(type) {
		case string:
			if reason := checkPath(t, name, v, roots); reason != "" {
				return reason
			}
		case []any:
			for i, e := range v {
				s, ok := e.(string)
				if !ok {
					return fmt.Sprintf("denied: argument %q of %s must be a path or a list of paths, but element %d is %s; send strings", name, t.Name, i, aJSONType(e))
				}
				if reason := checkPath(t, fmt.Sprintf("%s[%d]", name, i), s, roots); reason != "" {
					return reason
				}
			}
		default:
			return fmt.Sprintf("denied: argument %q of %s must be a path or a list of paths, not %s; send a string", name, t.Name, aJSONType(v))
		}
	}
	return ""
}

func checkPath(t Tool, arg, p string, roots []string) string {
	allowed := strings.Join(t.PathRoots, ", ")
	switch {
	case p == "":
		return fmt.Sprintf("denied: argument %q of %s is an empty path; use an absolute path under %s", arg, t.Name, allowed)
	case strings.ContainsRune(p, 0):
		return fmt.Sprintf("denied: argument %q of %s contains a NUL byte; use an absolute path under %s", arg, t.Name, allowed)
	case !filepath.IsAbs(p):
		return fmt.Sprintf("denied: argument %q of %s (%s) is a relative path; use an absolute path under %s", arg, t.Name, clip(p), allowed)
	}
	clean := filepath.Clean(p)
	resolved, err := resolvePath(clean)
	if err != nil {
		return fmt.Sprintf("denied: argument %q of %s (%s) cannot be checked: %v; use an existing directory under %s", arg, t.Name, clip(p), err, allowed)
	}
	for _, r := range roots {
		if within(resolved, r) {
			return ""
		}
	}
	if resolved != clean {
		return fmt.Sprintf("denied: argument %q of %s (%s) resolves through a symlink to %s, outside the allowed directories; use a path under %s that stays inside them",
			arg, t.Name, clip(p), clip(resolved), allowed)
	}
	shown := clip(p)
	if clean != p {
		shown += ", that is " + clip(clean)
	}
	return fmt.Sprintf("denied: argument %q of %s (%s) is outside the allowed directories; use a path under %s", arg, t.Name, shown, allowed)
}

// resolvePath resolves the symlinks of a clean absolute path. The path need
// not exist (a file about to be written): the deepest existing ancestor is
// resolved and the missing rest re-appended. A component that exists but
// cannot be resolved (a dangling or looping symlink) is an error, because
// writing through a dangling symlink creates its target, wherever it is.
func resolvePath(p string) (string, error) {
	rest := ""
	cur := p
	for {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			if rest == "" {
				return r, nil
			}
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", errors.New(describeFSError(err))
		}
		if _, lerr := os.Lstat(cur); lerr == nil {
			return "", fmt.Errorf("%s is a symlink whose target does not exist", cur)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", fmt.Errorf("no part of %s exists", p)
		}
		if rest == "" {
			rest = filepath.Base(cur)
		} else {
			rest = filepath.Join(filepath.Base(cur), rest)
		}
		cur = parent
	}
}

// describeFSError drops the operation name from a *fs.PathError, which
// says "lstat" where the model needs only the path and the cause.
func describeFSError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Path + ": " + pe.Err.Error()
	}
	return err.Error()
}

// within reports whether p is root or below it; both are clean and
// resolved.
func within(p, root string) bool {
	if p == root {
		return true
	}
	if !strings.HasSuffix(root, string(filepath.Separator)) {
		root += string(filepath.Separator)
	}
	return strings.HasPrefix(p, root)
}
