// Driver for Go's gomemcache (github.com/bradfitz/gomemcache, as Debian
// packages it), speaking the JSON line protocol described in
// tests/clients/clientmatrix.py: one request per line on stdin, one reply
// per line on stdout.
//
//	gomemcache_driver HOST:PORT [timeout_ms=N]
//
// Built offline from Debian's source package (GO111MODULE=off,
// GOPATH=/usr/share/gocode).  timeout_ms sets Client.Timeout, the socket
// read/write deadline (default 100 ms).
package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

func run(c *memcache.Client, req []json.RawMessage) (interface{}, error) {
	var op string
	if len(req) == 0 || json.Unmarshal(req[0], &op) != nil {
		return nil, errors.New("bad request")
	}
	str := func(i int) string {
		var s string
		if i < len(req) {
			json.Unmarshal(req[i], &s)
		}
		return s
	}
	switch op {
	case "set":
		data, err := hex.DecodeString(str(2))
		if err != nil {
			return nil, err
		}
		err = c.Set(&memcache.Item{Key: str(1), Value: data})
		if err == memcache.ErrNotStored {
			return false, nil
		}
		return err == nil, err
	case "get":
		it, err := c.Get(str(1))
		if err == memcache.ErrCacheMiss {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return hex.EncodeToString(it.Value), nil
	case "mget":
		var keys []string
		if len(req) < 2 || json.Unmarshal(req[1], &keys) != nil {
			return nil, errors.New("mget needs a list of keys")
		}
		m, err := c.GetMulti(keys)
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for k, it := range m {
			out[k] = hex.EncodeToString(it.Value)
		}
		return out, nil
	case "version", "stats":
		return nil, fmt.Errorf("gomemcache has no %s call", op)
	}
	return nil, fmt.Errorf("unknown op %s", op)
}

func main() {
	c := memcache.New(os.Args[1])
	for _, a := range os.Args[2:] {
		if v := strings.TrimPrefix(a, "timeout_ms="); v != a {
			ms, err := strconv.Atoi(v)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bad timeout_ms")
				os.Exit(2)
			}
			c.Timeout = time.Duration(ms) * time.Millisecond
		}
	}
	in := bufio.NewReader(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			return
		}
		var req []json.RawMessage
		var rep map[string]interface{}
		if e := json.Unmarshal(line, &req); e != nil {
			rep = map[string]interface{}{"err": e.Error()}
		} else if r, e := run(c, req); e != nil {
			rep = map[string]interface{}{"err": e.Error()}
		} else {
			rep = map[string]interface{}{"r": r}
		}
		out.Encode(rep)
	}
}
