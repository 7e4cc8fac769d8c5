<?php
// Driver for PHP's memcache clients (the JSON line protocol described in
// tests/clients/clientmatrix.py): one request per line on stdin, one reply
// per line on stdout.
//
//   php php_driver.php EXT HOST:PORT [binary=1] [timeout_ms=N]
//
// EXT is memcache (pecl memcache, text protocol only) or memcached (pecl
// memcached over libmemcached; binary=1 sets OPT_BINARY_PROTOCOL).
// Compression is turned off in both so that other clients read the bytes.
// timeout_ms replaces the client's default timeout (memcache: 1 s;
// memcached: OPT_POLL_TIMEOUT, 1 s).

[$ext, $addr] = [$argv[1], $argv[2]];
$opts = [];
foreach (array_slice($argv, 3) as $a) {
    [$k, $v] = explode('=', $a, 2);
    $opts[$k] = $v;
}
[$host, $port] = explode(':', $addr);

if ($ext === 'memcache') {
    $m = new Memcache();
    $timeout = isset($opts['timeout_ms']) ? $opts['timeout_ms'] / 1000.0 : 1;
    $m->addServer($host, (int)$port, false, 1, $timeout);
    $c = [
        'set' => function ($k, $v) use ($m) { return $m->set($k, $v, 0, 0); },
        // A miss is false; an empty body is "".
        'get' => function ($k) use ($m) { $v = $m->get($k); return $v === false ? null : $v; },
        'mget' => function ($ks) use ($m) { $r = $m->get($ks); return $r === false ? [] : $r; },
        'version' => function () use ($m) { return $m->getVersion(); },
        'stats' => function () use ($m) { return $m->getStats(); },
    ];
} elseif ($ext === 'memcached') {
    $m = new Memcached();
    $m->setOption(Memcached::OPT_COMPRESSION, false);
    if (!empty($opts['binary'])) {
        $m->setOption(Memcached::OPT_BINARY_PROTOCOL, true);
    }
    if (isset($opts['timeout_ms'])) {
        $m->setOption(Memcached::OPT_POLL_TIMEOUT, (int)$opts['timeout_ms']);
    }
    $m->addServer($host, (int)$port);
    $check = function ($r) use ($m) {
        $rc = $m->getResultCode();
        if ($rc !== Memcached::RES_SUCCESS && $rc !== Memcached::RES_NOTFOUND
            && $rc !== Memcached::RES_NOTSTORED) {
            throw new Exception($m->getResultMessage() . " (code $rc)");
        }
        return $r;
    };
    $c = [
        'set' => function ($k, $v) use ($m, $check) { return $check($m->set($k, $v)); },
        'get' => function ($k) use ($m, $check) {
            $v = $check($m->get($k));
            return $m->getResultCode() === Memcached::RES_NOTFOUND ? null : $v;
        },
        'mget' => function ($ks) use ($m, $check) { $r = $check($m->getMulti($ks)); return $r ?: []; },
        'version' => function () use ($m, $check) { return $check($m->getVersion())["$GLOBALS[addr]"]; },
        'stats' => function () use ($m, $check) { return $check($m->getStats())["$GLOBALS[addr]"]; },
    ];
} else {
    fwrite(STDERR, "unknown extension $ext\n");
    exit(2);
}

function hexof($v) { return $v === null ? null : bin2hex($v); }

function run($c, $req) {
    switch ($req[0]) {
    case 'set':
        return $c['set']($req[1], hex2bin($req[2]));
    case 'get':
        return hexof($c['get']($req[1]));
    case 'mget':
        $out = new stdClass();
        foreach ($c['mget']($req[1]) as $k => $v) {
            $out->$k = hexof($v);
        }
        return $out;
    case 'version':
        $v = $c['version']();
        if (!is_string($v)) throw new Exception('version failed: ' . var_export($v, true));
        return $v;
    case 'stats':
        $s = $c['stats']();
        if (!is_array($s)) throw new Exception('stats failed: ' . var_export($s, true));
        $out = new stdClass();
        foreach ($s as $k => $v) $out->$k = (string)$v;
        return $out;
    }
    throw new Exception("unknown op $req[0]");
}

// Warnings (a failed connect, a timeout) become errors of the request.
set_error_handler(function ($no, $str) { throw new ErrorException($str, 0, $no); });
while (($line = fgets(STDIN)) !== false) {
    try {
        $out = ['r' => run($c, json_decode($line, true))];
    } catch (Throwable $e) {
        $out = ['err' => get_class($e) . ': ' . $e->getMessage()];
    }
    echo json_encode($out), "\n";
    fflush(STDOUT);
}
