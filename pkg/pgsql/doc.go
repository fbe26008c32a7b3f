// Package pgsql is everything pgloop does over SQL to a cluster: it creates
// and alters the roles and databases of the spec (Sync), reads parameters as
// a server has them (Settings) and sets a role's password (SetPassword).
//
// The effects call it off the operator's event loop, each call under a
// context deadline. Every call opens one connection, runs a few statements
// and closes it: there is no pool, since a sync runs seldom and a cluster's
// primary may have moved since the last one. Every connection and statement
// is bounded (Options), and every outcome is counted (Options.Observe).
//
// Nothing from the caller is formatted into SQL by hand: identifiers go
// through pgx.Identifier, passwords through the connection's own string
// escaping, and catalog queries take bind parameters. A session that sends a
// password first turns off every statement log the server has, so that no
// password reaches its log.
package pgsql
