package benchshape

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// Doris is a Doris-like catalog: databases of tables of partitions of
// tablets of replicas. Replicas carry worker, version, state and size
// attributes and are indexed by worker; tables carry engine = "olap".
type Doris struct {
	DBs, Tables, Parts, Tablets, Replicas, Workers int
}

var (
	// Full is the 4,012,551-node catalog Doris cites for 2 GB of frontend
	// memory.
	Full = Doris{50, 50, 4, 100, 3, 100}
	// Small is 1/50 of it (80,256 nodes by Nodes, the root included).
	Small = Doris{5, 10, 4, 100, 3, 100}
)

// Nodes is the number of nodes of the catalog, the root included.
func (d Doris) Nodes() int {
	t := d.DBs * d.Tables
	p := t * d.Parts
	tb := p * d.Tablets
	return 1 + d.DBs + t + p + tb + tb*d.Replicas
}

// ReplicaTotal is the number of replica nodes.
func (d Doris) ReplicaTotal() int {
	return d.DBs * d.Tables * d.Parts * d.Tablets * d.Replicas
}

// TabletTotal is the number of tablet nodes.
func (d Doris) TabletTotal() int { return d.DBs * d.Tables * d.Parts * d.Tablets }

// ReplicaPath is the path of replica rep of tablet (numbered from 1, in
// the order Walk creates them).
func (d Doris) ReplicaPath(tablet, rep int) string {
	perTable := d.Parts * d.Tablets
	tbl := (tablet - 1) / perTable
	part := ((tablet - 1) % perTable) / d.Tablets
	return fmt.Sprintf("/db%02d/tbl%02d/p%d/tablet%d/r%d", tbl/d.Tables, tbl%d.Tables, part, tablet, rep)
}

// Node is one node Walk creates. Kind is "database", "table",
// "partition", "tablet" or "replica"; DB is its database's number; Tablet
// (from 1) and Rep are set for tablets and replicas, and Replica holds a
// replica's attributes.
type Node struct {
	Kind, Path  string
	DB          int
	Tablet, Rep int
	Replica     Replica
}

// Replica is a replica's attributes.
type Replica struct {
	Worker, Version, Size int64
	State                 string
}

// Walk calls create for every node of the catalog but the root, parents
// before their children, in one fixed order: databases in turn, and in
// each the tables, partitions, tablets and replicas depth first. The
// replicas' versions and sizes are drawn from a generator seeded with 1,
// 2, so every walk creates the same catalog.
func (d Doris) Walk(create func(Node)) {
	r := rand.New(rand.NewPCG(1, 2))
	tablet := 0
	for db := range d.DBs {
		dbp := fmt.Sprintf("/db%02d", db)
		create(Node{Kind: "database", Path: dbp, DB: db})
		for t := range d.Tables {
			tp := fmt.Sprintf("%s/tbl%02d", dbp, t)
			create(Node{Kind: "table", Path: tp, DB: db})
			for p := range d.Parts {
				pp := tp + "/p" + strconv.Itoa(p)
				create(Node{Kind: "partition", Path: pp, DB: db})
				for range d.Tablets {
					tablet++
					tbp := pp + "/tablet" + strconv.Itoa(tablet)
					create(Node{Kind: "tablet", Path: tbp, DB: db, Tablet: tablet})
					for rep := range d.Replicas {
						size := int64(r.IntN(1 << 30))
						version := int64(1 + r.IntN(1000))
						create(Node{Kind: "replica", Path: tbp + "/r" + strconv.Itoa(rep), DB: db, Tablet: tablet, Rep: rep,
							Replica: Replica{Worker: int64((tablet*d.Replicas + rep) % d.Workers), Version: version, Size: size, State: "NORMAL"}})
					}
				}
			}
		}
	}
}
