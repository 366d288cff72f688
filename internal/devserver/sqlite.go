package devserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/server/common/config"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"google.golang.org/protobuf/types/known/durationpb"
)

// sqlConfig is the persistence config the server runs with. Keys the SQLite
// plugin does not know become pragmas; they must not carry the underscore
// prefix seen elsewhere ("_journal_mode"), which makes them unknown pragmas
// that SQLite silently ignores. WAL lets readers run beside the
// writer, and synchronous=normal is crash-safe in WAL mode: a kill -9 loses
// nothing the OS has seen, a power cut at most the last transactions.
func sqlConfig(file string) *config.SQL {
	return &config.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: file,
		ConnectAttributes: map[string]string{
			"mode":         "rwc",
			"journal_mode": "wal",
			"synchronous":  "normal",
		},
	}
}

// prepareDatabase makes sure file holds the Temporal schema and the
// namespace, and returns the config to run the server with. The caller holds
// the data directory lock.
func prepareDatabase(file, namespace string, retention time.Duration) (*config.SQL, error) {
	nsCfg, err := sqliteschema.NewNamespaceConfig(clusterName, namespace, false, nil)
	if err != nil {
		return nil, fmt.Errorf("namespace config: %w", err)
	}
	// NewNamespaceConfig hard-codes 24h, after which closed workflows, and
	// the audit trail in their histories, are deleted.
	nsCfg.Detail.Config.Retention = durationpb.New(retention)

	_, err = os.Stat(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := createDatabase(file, nsCfg); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("database %s: %w", file, err)
	default:
		// A no-op unless Options.Namespace names a namespace this
		// database has not seen yet.
		if err := sqliteschema.CreateNamespaces(sqlConfig(file), nsCfg); err != nil {
			return nil, fmt.Errorf("create namespace %s: %w", namespace, err)
		}
	}
	return sqlConfig(file), nil
}

// createDatabase builds the schema and namespace in a scratch file and
// renames it into place, so a crash during the first start leaves no
// half-built database that later starts would take as ready (they only run
// the schema setup when the file is missing).
func createDatabase(file string, nsCfg *sqliteschema.NamespaceConfig) error {
	tmp := file + ".new"
	for _, f := range []string{tmp, tmp + "-journal"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove leftover %s: %w", f, err)
		}
	}
	// A rollback journal, not WAL, while building: on close nothing is left
	// beside the file to move along with it. The server's first connection
	// switches the file to WAL, which then sticks.
	tmpCfg := &config.SQL{
		PluginName:        sqliteplugin.PluginName,
		DatabaseName:      tmp,
		ConnectAttributes: map[string]string{"mode": "rwc"},
	}
	if err := sqliteschema.SetupSchema(tmpCfg); err != nil {
		return fmt.Errorf("create schema in %s: %w", tmp, err)
	}
	if err := sqliteschema.CreateNamespaces(tmpCfg, nsCfg); err != nil {
		return fmt.Errorf("create namespace %s: %w", nsCfg.Detail.GetInfo().GetName(), err)
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("move new database into place: %w", err)
	}
	return syncFile(filepath.Dir(file))
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}
