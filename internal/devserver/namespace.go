package devserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/rs/zerolog"
	enumspb "go.temporal.io/api/enums/v1"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"google.golang.org/protobuf/types/known/durationpb"
)

// configureNamespace waits for the frontend, then brings the namespace's
// search attributes and retention up to opts. Both steps run at every start:
// the namespace may predate the current options.
func configureNamespace(ctx context.Context, hostPort string, opts Options, minLevel zerolog.Level) error {
	c, err := dialReady(ctx, hostPort, opts.Namespace, opts.Logger.Level(minLevel))
	if err != nil {
		return err
	}
	defer c.Close()
	if err := ensureSearchAttributes(ctx, c, opts.Namespace, opts.SearchAttributes); err != nil {
		return err
	}
	if err := ensureRetention(ctx, c, opts.Namespace, opts.Retention); err != nil {
		return err
	}
	return ensureData(ctx, c, opts.Namespace, opts.Data)
}

// ensureData sets the namespace data keys whose value differs from want.
func ensureData(ctx context.Context, c client.Client, namespace string, want map[string]string) error {
	if len(want) == 0 {
		return nil
	}
	desc, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("describe namespace %s: %w", namespace, err)
	}
	have := desc.GetNamespaceInfo().GetData()
	changed := map[string]string{}
	for k, v := range want {
		if have[k] != v {
			changed[k] = v
		}
	}
	if len(changed) == 0 {
		return nil
	}
	if _, err := c.WorkflowService().UpdateNamespace(ctx, &workflowservice.UpdateNamespaceRequest{
		Namespace:  namespace,
		UpdateInfo: &namespacepb.UpdateNamespaceInfo{Data: changed},
	}); err != nil {
		return fmt.Errorf("set the data of namespace %s: %w", namespace, err)
	}
	return nil
}

// dialReady retries until the frontend serves the namespace. Server.Start
// returns once the services are started, but the frontend may still refuse
// connections or not know the namespace for a moment.
func dialReady(ctx context.Context, hostPort, namespace string, zl zerolog.Logger) (client.Client, error) {
	logger := sdklog.NewStructuredLogger(slog.New(zerolog.NewSlogHandler(zl)))
	delay := 10 * time.Millisecond
	for {
		c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Namespace: namespace, Logger: logger})
		if err == nil {
			_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
			if err == nil {
				return c, nil
			}
			c.Close()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("frontend at %s not ready: %w", hostPort, errors.Join(ctx.Err(), err))
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// ensureSearchAttributes adds the attributes the namespace lacks. Adding an
// existing one is harmless, but the server then logs a warning per attribute
// at every start, so only the missing ones are sent.
func ensureSearchAttributes(ctx context.Context, c client.Client, namespace string, want map[string]enumspb.IndexedValueType) error {
	if len(want) == 0 {
		return nil
	}
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	slices.Sort(names)

	missing := map[string]enumspb.IndexedValueType{}
	var errs []error
	for _, name := range names {
		typ := want[name]
		if typ == enumspb.INDEXED_VALUE_TYPE_UNSPECIFIED {
			errs = append(errs, fmt.Errorf("search attribute %s: type unspecified", name))
			continue
		}
		if got, ok := resp.GetSystemAttributes()[name]; ok {
			errs = append(errs, fmt.Errorf("search attribute %s: clashes with the system attribute of type %s", name, got))
			continue
		}
		got, ok := resp.GetCustomAttributes()[name]
		switch {
		case !ok:
			missing[name] = typ
		case got != typ:
			// Temporal cannot change an attribute's type in place.
			errs = append(errs, fmt.Errorf("search attribute %s: registered as %s, want %s", name, got, typ))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace:        namespace,
		SearchAttributes: missing,
	}); err != nil {
		return fmt.Errorf("add search attributes: %w", err)
	}
	return nil
}

// ensureRetention raises the namespace's retention to at least retention. A
// longer one, set by hand, is left alone.
func ensureRetention(ctx context.Context, c client.Client, namespace string, retention time.Duration) error {
	desc, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("describe namespace %s: %w", namespace, err)
	}
	if desc.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration() >= retention {
		return nil
	}
	if _, err := c.WorkflowService().UpdateNamespace(ctx, &workflowservice.UpdateNamespaceRequest{
		Namespace: namespace,
		Config:    &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: durationpb.New(retention)},
	}); err != nil {
		return fmt.Errorf("raise retention of namespace %s to %s: %w", namespace, retention, err)
	}
	return nil
}

// CreateNamespace registers namespace name on the running server with the
// retention and search attributes of Start's options (not its Data), and
// returns once the frontend serves it with those attributes. A namespace
// per user isolates workflows, task queues and visibility on one server,
// which is cheaper than a server each: the integration tests share one.
// It fails if the namespace exists.
func (s *Server) CreateNamespace(ctx context.Context, name string) error {
	if name == "" {
		return errors.New("devserver: create namespace: name is empty")
	}
	c, err := dialReady(ctx, s.hostPort, s.namespace, s.opts.Logger.Level(s.logger.level()))
	if err != nil {
		return fmt.Errorf("devserver: %w", err)
	}
	defer c.Close()
	if _, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        name,
		WorkflowExecutionRetentionPeriod: durationpb.New(s.opts.Retention),
	}); err != nil {
		return fmt.Errorf("devserver: register namespace %s: %w", name, err)
	}
	if err := ensureSearchAttributes(ctx, c, name, s.opts.SearchAttributes); err != nil {
		return fmt.Errorf("devserver: namespace %s: %w", name, err)
	}
	if err := awaitSearchAttributes(ctx, c, name, s.opts.SearchAttributes); err != nil {
		return fmt.Errorf("devserver: namespace %s: %w", name, err)
	}
	return nil
}

// awaitSearchAttributes waits until the frontend's namespace cache knows the
// namespace's search attributes. Adding them updates the namespace record,
// but the frontend may have cached the record without them (it looks the
// namespace up for every request naming it) and refreshes its cache only
// every few seconds (system.namespaceCacheRefreshInterval, 2s); until then a
// workflow started with one of them is refused. A visibility query naming
// one of them fails the same way, and starts nothing.
func awaitSearchAttributes(ctx context.Context, c client.Client, namespace string, attrs map[string]enumspb.IndexedValueType) error {
	if len(attrs) == 0 {
		return nil
	}
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
	}
	slices.Sort(names)
	// They are added in one update, so one of them stands for all.
	query := names[0] + " IS NULL"
	delay := 10 * time.Millisecond
	for {
		_, err := c.WorkflowService().CountWorkflowExecutions(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: query})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("search attribute %s not usable: %w", names[0], errors.Join(ctx.Err(), err))
		case <-time.After(delay):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}
