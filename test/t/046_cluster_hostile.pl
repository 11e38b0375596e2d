# A Redis Cluster node that does not keep to the protocol, through a
# relay that can lie (RlockTest::Hostile): a cluster of one node serving
# every slot, whose slot map, as the relay tells it, names the relay as
# that node, so that every connection of rlock goes through it.
#
# - CLUSTER SHARDS unknown (Redis 6): the map comes from CLUSTER SLOTS;
# - maps that make no sense: refused with the reason, the worker lives;
# - MOVED with a slot or a port out of range: the request fails with
#   Redis's words, nothing followed;
# - MOVED and ASK for another slot than the command's: not followed, the
#   request fails with Redis's words;
# - MOVED and ASK back to the same node for ever: 58030 within the usual
#   bound, at a bounded rate;
# - MOVED and ASK to a node the map does not name: never connected to
#   (no password, no lock there), 58030 within the bound;
# - an unasked sunsubscribe for a channel nobody waits on: ignored.
# The worker is the same process at the end.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Hostile;
use RlockTest::Recorder;

plan skip_all => 'the relay reads the plain protocol: the plain round runs this'
  if RlockTest::TLS::everywhere();

my ($redis, $hostile) = RlockTest::Hostile->cluster_of_one;
my $id = $redis->cmd('CLUSTER', 'MYID');
my $relay = $hostile->port;

# RESP of a Perl value: array refs are arrays, \N integers, strings bulk
sub resp { return RlockTest::Resp::encode(@_) }

# CLUSTER SHARDS naming the relay as the node of every slot
sub shards_via_relay
{
	my (%opt) = @_;
	return resp([ [ 'slots', [ \0, \16383 ],
		'nodes', [ [ 'id', $id, 'port', \($opt{port} // $relay), 'ip', '127.0.0.1',
			'endpoint', '127.0.0.1', 'role', 'master',
			'replication-offset', \0, 'health', 'online' ] ] ] ]);
}

sub status
{
	my ($node, $cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM rlock_status()");
}

#---- the map names the relay: every connection goes through it ----

$hostile->replace('rlock_cluster', qr/^CLUSTER SHARDS/, shards_via_relay());
my $node = RlockTest::node('ch', $redis,
	connect_timeout => '1s',
	command_timeout => '1s',
	conf => [ "rlock.topology = 'cluster'", "rlock.nodes = '127.0.0.1:$relay'" ]);
my $worker = RlockTest::worker_pid($node);
ok( RlockTest::wait_until(
		sub {
			status($node, 'cluster_primaries, command_connection') eq '1|ready'
			  && $hostile->connections('rlock_command') > 0;
		},
		20),
	'the map names the relay, and the command connection goes through it');
is($node->safe_psql('postgres', "BEGIN; SELECT rlock_try('h:relayed'); COMMIT"), 't',
	'a lock is taken through the relay');

#---- maps that make no sense ----

for my $bad (
	[ 'a port of 0', shards_via_relay(port => 0), qr/a primary without a valid port/ ],
	[ 'a number for a map', ":7\r\n", qr/a reply of the wrong shape/ ],
	[ 'a range out of bounds',
		resp([ [ 'slots', [ \0, \20000 ], 'nodes', [ [ 'id', $id, 'port', \$relay,
			'endpoint', '127.0.0.1', 'role', 'master' ] ] ] ]),
		qr/a slot range that is not one/ ])
{
	my ($what, $bytes, $why) = @$bad;
	$hostile->clear;
	$hostile->replace('rlock_cluster', qr/^CLUSTER SHARDS/, $bytes);
	$hostile->drop_all;
	ok( RlockTest::wait_until(sub { status($node, 'last_error') =~ $why }, 15),
		"$what: refused, rlock_status says why")
	  or diag(status($node, 'last_error'));
}
$hostile->clear;
$hostile->replace('rlock_cluster', qr/^CLUSTER SHARDS/, shards_via_relay());
$hostile->drop_all;
ok(RlockTest::wait_for_cluster_map($node, 1), 'a good map again');

#---- redirections that make no sense ----

# Honest again but for the map, which keeps naming the relay (a MOVED
# makes rlock ask for it again, maybe right now: the map's rule is never
# lifted, or an honest map naming the node itself could slip through and
# take the commands past the relay)
sub relay_map
{
	$hostile->clear('rlock_command');
}

my $acquire = qr/^EVALSHA \S+ 1 h:/;
for my $bad ([ 'a slot out of range', "-MOVED 70000 127.0.0.1:$relay\r\n" ],
	[ 'a port out of range', "-MOVED 5 127.0.0.1:70000\r\n" ],
	[ 'a host with a space', "-MOVED 5 127.0.0.1 x:$relay\r\n" ],
	[ 'no address', "-MOVED 5\r\n" ])
{
	my ($what, $bytes) = @$bad;
	relay_map();
	$hostile->replace('rlock_command', $acquire, $bytes);
	my ($rc, $out, $err) = RlockTest::timed_psql($node, "BEGIN; SELECT rlock_try('h:bad'); COMMIT");
	like($err, qr/ERROR:  \w{5}: .*\n(?:.*\n)*.*DETAIL:  \Q${\ substr($bytes, 1, 5)}\E/,
		"MOVED with $what: the request fails with Redis's words");
}

# a redirection for another slot than the command's: not followed, the
# request fails with Redis's words
my $loop_slot = $redis->cmd('CLUSTER', 'KEYSLOT', 'h:loop');
my $other_slot = ($loop_slot + 1) % 16384;
for my $what ('MOVED', 'ASK')
{
	relay_map();
	$hostile->replace('rlock_command', $acquire, "-$what $other_slot 127.0.0.1:$relay\r\n");
	my ($rc, $out, $err) = RlockTest::timed_psql($node, "BEGIN; SELECT rlock_try('h:loop'); COMMIT");
	like($err, qr/ERROR:  58000: Redis returned an error for lock "h:loop"\n.*DETAIL:  $what $other_slot /s,
		"$what for another slot: not followed, the request fails with Redis's words");
}

# for ever back to the same node: MOVED, then ASK
for my $loop ([ 'MOVED', "-MOVED $loop_slot 127.0.0.1:$relay\r\n" ],
	[ 'ASK', "-ASK $loop_slot 127.0.0.1:$relay\r\n" ])
{
	my ($what, $bytes) = @$loop;
	relay_map();
	$hostile->replace('rlock_command', $acquire, $bytes);
	my $n0 = $hostile->commands;
	my ($rc, $out, $err, $took) = RlockTest::timed_psql($node, "BEGIN; SELECT rlock_try('h:loop'); COMMIT");
	my $n = $hostile->commands - $n0;
	like($err, qr/ERROR:  58030:/, "$what to the same node for ever: 58030")
	  or diag("out: $out");
	cmp_ok($took, '<', 4, sprintf('%s: within the bound (%.1f s)', $what, $took));
	cmp_ok($n, '<', 1500, "$what: $n commands relayed meanwhile, not a hot loop");
}

# to a node the map does not name: nothing goes there (no connection,
# no password, no lock), the map is asked again, and the request ends
# within its bound
my $hole_slot = $redis->cmd('CLUSTER', 'KEYSLOT', 'h:hole');
my $elsewhere = RlockTest::Recorder->start(ports => 1);
my ($elsewhere_port) = $elsewhere->ports;
for my $what ('MOVED', 'ASK')
{
	relay_map();
	$hostile->replace('rlock_command', $acquire,
		"-$what $hole_slot 127.0.0.1:$elsewhere_port\r\n");
	my ($rc, $out, $err, $took) = RlockTest::timed_psql($node, "BEGIN; SELECT rlock_try('h:hole'); COMMIT");
	like($err, qr/ERROR:  58030:.*\n.*a redirection to a node the slot map does not name/s,
		"$what to a node the map does not name: 58030, saying so");
	cmp_ok($took, '<', 4, sprintf('within the bound (%.1f s)', $took));
}
is(scalar($elsewhere->connections), 0,
	'the node the map does not name was never connected to');
$elsewhere->stop;
relay_map();

#---- CLUSTER SHARDS unknown: CLUSTER SLOTS ----

# The CLUSTER SLOTS answer names two primaries, the relay for the first
# half of the slots and the node itself for the second (both are the one
# node): only a map read from it has two.
$hostile->clear;
$hostile->replace('rlock_cluster', qr/^CLUSTER SHARDS/,
	"-ERR Unknown subcommand or wrong number of arguments for 'SHARDS'. Try CLUSTER HELP.\r\n");
$hostile->replace('rlock_cluster', qr/^CLUSTER SLOTS/,
	resp([ [ \0, \8191, [ '127.0.0.1', \$relay, $id ] ],
		   [ \8192, \16383, [ '127.0.0.1', \($redis->port), $id ] ] ]));
$hostile->drop_all;
ok(RlockTest::wait_for_cluster_map($node, 2),
	'a node without CLUSTER SHARDS (Redis 6): the map comes from CLUSTER SLOTS');
is($node->safe_psql('postgres', "BEGIN; SELECT rlock_try(k) FROM unnest(ARRAY['h:s1', 'h:s2', 'h:s3', 'h:s4']) k; COMMIT"),
	"t\nt\nt\nt", 'and locks are taken on the nodes it names');

#---- an unasked sunsubscribe ----

$hostile->inject('rlock_subscriber',
	resp([ 'sunsubscribe', 'redisson_lock__channel:{nobody}', \0 ]));
is($node->safe_psql('postgres', "BEGIN; SELECT rlock_try('h:after'); COMMIT"), 't',
	'after an unasked sunsubscribe, locks still work');

is(RlockTest::worker_pid($node), $worker, 'the worker is the same process');
unlike(slurp_file($node->logfile), qr/TRAP|terminated by signal/, 'no crash in the log');

$node->stop;
$hostile->stop;
$redis->stop;
done_testing();
