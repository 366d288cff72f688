package main

import (
	"context"
	"path/filepath"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/internal/auditstream"
)

// The keys airlock dev sets in its embedded Temporal's namespace data, so
// that a CLI connected to that Temporal writes and reads where the dev does
// whatever its working directory and flags: the server it talks to is the
// one authority on which dev runs it (a file found by path would say
// nothing of which server it belongs to).
const (
	nsDataDir  = "airlock.dev.data_dir"  // absolute
	nsAuditLog = "airlock.dev.audit_log" // absolute file, or stdout, stderr, off
)

// devNamespaceData is what the dev records in its namespace.
func devNamespaceData(e *env) map[string]string {
	audit := e.auditDest()
	switch audit {
	case auditstream.Stdout, auditstream.Stderr, auditstream.Off:
	default:
		if abs, err := filepath.Abs(audit); err == nil {
			audit = abs
		}
	}
	return map[string]string{nsDataDir: e.dataDir, nsAuditLog: audit}
}

// runningDev is the data dir and audit log of the airlock dev whose
// embedded Temporal tc talks to; both "" for any other Temporal (or when
// the namespace cannot be described: the caller falls back to the
// configuration).
func runningDev(ctx context.Context, tc client.Client, namespace string) (dataDir, auditLog string) {
	desc, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		return "", ""
	}
	d := desc.GetNamespaceInfo().GetData()
	return d[nsDataDir], d[nsAuditLog]
}
