package api

import (
	"fmt"
	"strings"
)

// defaultTaskSuffix ends the ID of every principal's default task.
const defaultTaskSuffix = "-default"

// DefaultTaskID is the task of a principal's calls that name no task and
// have no session of their own (stateless HTTP clients without an
// Airlock-Task header): "<principal>-default". It is predictable on
// purpose, so a client can reattach to it; ClaimTaskID keeps every other
// principal from taking it first.
func DefaultTaskID(principal string) string { return principal + defaultTaskSuffix }

// ClaimTaskID says whether principal may name a task id of its choosing
// (start it, or attach to it): nil, or an error saying why not. The IDs
// airlock derives itself are reserved: "<p>-default" is only principal
// p's (another principal starting it first would lock p out of its
// default task, since a task belongs to the principal that started it),
// and "rollback-…" only airlock's rollbacks (RollbackTaskID). Whether a
// task that exists belongs to principal is checked separately, against
// the running task.
func ClaimTaskID(id, principal string) error {
	if owner, ok := strings.CutSuffix(id, defaultTaskSuffix); ok && owner != principal {
		return fmt.Errorf("task ID %q is reserved: IDs ending in %q are the default task of the principal they name (%q), and you are %q; pick another ID, or use %q",
			id, defaultTaskSuffix, owner, principal, DefaultTaskID(principal))
	}
	if strings.HasPrefix(id, "rollback-") {
		return fmt.Errorf("task ID %q is reserved: IDs starting with \"rollback-\" are airlock's rollbacks of ended tasks; pick another ID", id)
	}
	return nil
}
