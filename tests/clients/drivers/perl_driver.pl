#!/usr/bin/perl
# Driver for Perl's memcache clients (the JSON line protocol described in
# tests/clients/clientmatrix.py): one request per line on stdin, one reply
# per line on stdout.
#
#   perl perl_driver.pl MODULE HOST:PORT [timeout_ms=N]
#
# MODULE is Cache::Memcached or Cache::Memcached::Fast (both text protocol).
# Compression stays off (neither module compresses unless told to).
# timeout_ms replaces the read timeout (Cache::Memcached's select_timeout,
# Cache::Memcached::Fast's io_timeout; both default to 1 s).
use strict;
use warnings;
use JSON::PP;

my ($module, $addr, @args) = @ARGV;
my %opt = map { split /=/, $_, 2 } @args;
my $timeout = exists $opt{timeout_ms} ? $opt{timeout_ms} / 1000.0 : undef;
my $c;
if ($module eq 'Cache::Memcached') {
    require Cache::Memcached;
    $c = Cache::Memcached->new({ servers => [$addr],
        defined $timeout ? (select_timeout => $timeout) : () });
} elsif ($module eq 'Cache::Memcached::Fast') {
    require Cache::Memcached::Fast;
    $c = Cache::Memcached::Fast->new({ servers => [$addr],
        defined $timeout ? (io_timeout => $timeout) : () });
} else {
    die "unknown module $module\n";
}

sub hexof { defined $_[0] ? unpack('H*', $_[0]) : undef }

sub run {
    my ($req) = @_;
    my $op = $req->[0];
    if ($op eq 'set') {
        my $r = $c->set($req->[1], pack('H*', $req->[2]));
        die "set failed (no reply)\n" unless defined $r;
        return $r ? JSON::PP::true : JSON::PP::false;
    }
    return hexof($c->get($req->[1])) if $op eq 'get';
    if ($op eq 'mget') {
        my $r = $c->get_multi(@{ $req->[1] });
        return { map { ($_ => hexof($r->{$_})) } keys %$r };
    }
    if ($op eq 'version') {
        die "Cache::Memcached has no version call\n" unless $c->can('server_versions');
        my $v = $c->server_versions;
        die "no version\n" unless defined $v->{$addr};
        return $v->{$addr};
    }
    if ($op eq 'stats') {
        die "Cache::Memcached::Fast has no stats call\n" unless $c->can('stats');
        my $s = $c->stats(['misc']);
        my $h = $s->{hosts}{$addr}{misc} or die "no stats\n";
        return { map { ($_ => "$h->{$_}") } keys %$h };
    }
    die "unknown op $op\n";
}

$| = 1;
my $json = JSON::PP->new->canonical;
while (my $line = <STDIN>) {
    my $out = eval { { r => run($json->decode($line)) } };
    unless ($out) {
        my $e = $@ || 'unknown error';
        chomp $e;
        $out = { err => $e };
    }
    print $json->encode($out), "\n";
}
