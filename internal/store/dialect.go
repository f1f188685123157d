package store

import (
	"strconv"
	"strings"
)

// dialect is everything that differs between the SQL databases the store
// speaks. Queries are written once, with ? placeholders, TRUE/FALSE
// literals, BIGINT unix-nanosecond timestamps and INSERT ... ON CONFLICT
// (which SQLite and PostgreSQL spell the same way); the dialect fills in
// the rest. Adding a database means adding one value of this type (see
// docs/STORE.md).
type dialect struct {
	// name is "sqlite" or "postgres"; it appears in errors.
	name string
	// driver is the database/sql driver name.
	driver string
	// numbered placeholders: PostgreSQL wants $1, $2... where SQLite
	// takes ?.
	numbered bool
	// forShare is appended to the fencing read of the lease in
	// ApplySchedule, so a concurrent TryLease that changes the epoch waits
	// for (or is serialised after) the scheduling transaction. SQLite has
	// one writer, which already serialises them.
	forShare string
	// forUpdate is appended to the reads of read-then-write transactions
	// (" FOR UPDATE"), so that concurrent writers of one row take turns.
	// SQLite's single writer already serialises them.
	forUpdate string
	// nowSQL, when set, is a query returning the database's clock as unix
	// nanoseconds; leases then use it so that replicas on different hosts
	// agree. Empty means the store's Go clock (SQLite: one process).
	nowSQL string
	// ddl fills the migration templates: types that differ.
	ddl ddlTypes
}

// ddlTypes are the column types the migration templates name.
type ddlTypes struct {
	// Serial is an auto-incrementing 64-bit primary key.
	Serial string
	// Bytes is a binary string column.
	Bytes string
	// JSON is a column of JSON text, kept as written.
	JSON string
	// Postgres is set for PostgreSQL: a migration whose statement differs
	// there (JSON functions) branches on it.
	Postgres bool
}

// sqliteDialect is SQLite through modernc.org/sqlite (pure Go).
var sqliteDialect = dialect{
	name:   "sqlite",
	driver: "sqlite",
	ddl: ddlTypes{
		Serial: "INTEGER PRIMARY KEY AUTOINCREMENT",
		Bytes:  "BLOB",
		JSON:   "TEXT",
	},
}

// postgresDialect is PostgreSQL through jackc/pgx's database/sql driver.
var postgresDialect = dialect{
	name:      "postgres",
	driver:    "pgx",
	numbered:  true,
	forShare:  " FOR SHARE",
	forUpdate: " FOR UPDATE",
	nowSQL:    "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT * 1000",
	ddl: ddlTypes{
		Serial:   "BIGSERIAL PRIMARY KEY",
		Bytes:    "BYTEA",
		JSON:     "JSON",
		Postgres: true,
	},
}

// rebind rewrites ? placeholders for the dialect. The store's queries
// never hold a ? inside a string literal.
func (d *dialect) rebind(q string) string {
	if !d.numbered || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}
