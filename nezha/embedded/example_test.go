package embedded_test

import (
	"fmt"
	"log"
	"os"

	"github.com/nezha-harness/nezha/nezha/embedded"
)

func Example() {
	dir, err := os.MkdirTemp("", "embedded-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	db, err := embedded.Open(dir, embedded.DefaultOptions())
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Put([]byte("apple"), []byte("red")); err != nil {
		log.Fatal(err)
	}
	var b embedded.Batch // atomic: all or nothing, also across a crash
	b.Put([]byte("banana"), []byte("yellow"))
	b.Put([]byte("cherry"), []byte("dark red"))
	b.Delete([]byte("apple"))
	if err := db.Write(&b); err != nil {
		log.Fatal(err)
	}
	v, err := db.Get([]byte("banana"))
	fmt.Println(string(v), err)
	_, err = db.Get([]byte("apple"))
	fmt.Println(err)
	kvs, err := db.Scan([]byte("a"), nil, 0)
	if err != nil {
		log.Fatal(err)
	}
	for _, kv := range kvs {
		fmt.Printf("%s=%s\n", kv.Key, kv.Value)
	}
	if err := db.Close(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// yellow <nil>
	// embedded: key not found
	// banana=yellow
	// cherry=dark red
}
