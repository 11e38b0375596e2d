# rlock.tls = verify-full checks a data node's certificate against the
# name rlock connects to.  In a Redis Cluster that name is the address
# the slot map gives, and behind Sentinel the address a Sentinel gives:
# any certificate from a trusted CA that names that address passes.
# rlock.tls_server_name pins one name that every data node's certificate
# must carry instead.
#
# A cluster of three primaries whose certificates carry
# DNS:rlock-cluster.test and IP:127.0.0.1, and a fourth node, the
# intruder, that joined with CLUSTER MEET and was given a slot: its
# certificate comes from the same CA and names IP:127.0.0.1 only.
#
# - verify-full alone: the map names the intruder at 127.0.0.1, its
#   certificate names that address, and a lock of its slot is granted
#   there, and as a seed it is asked for the map;
# - rlock.tls_server_name = 'rlock-cluster.test': the intruder is refused
#   (58030, the detail and rlock_status() saying its certificate does not
#   carry the name, no connection past TLS and no script run there, the
#   map asked of the next seed), the real primaries serve their keys, and the pinned name goes
#   out as SNI, to the seeds too;
# - behind Sentinel, a Sentinel that names the intruder as the primary:
#   granted there by verify-full alone, refused with the pin, and a
#   primary whose certificate carries the name is used.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Recorder;

plan skip_all => 'TLS is the subject: the TLS round runs this'
  unless RlockTest::TLS::everywhere();

my $pin = 'rlock-cluster.test';
my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 0,
	tls => 1,
	node_cert => sub {
		RlockTest::TLS::server_cert("node$_[0]", "DNS:$pin,IP:127.0.0.1");
	});
my @real = $cluster->primaries;
my $intruder_cert = RlockTest::TLS::server_cert('intruder', 'IP:127.0.0.1');
my $intruder = $cluster->add_primary(cert => $intruder_cert);

# a lock of the intruder's slot, and one of a real primary's
my $bkey = 'pin:b';
my $akey = 'pin:a';
$cluster->migrate_slot($cluster->slot($bkey), $intruder);
is($cluster->owner($cluster->slot($bkey))->port, $intruder->port,
	'the intruder serves a slot');
my $aowner = $cluster->owner($cluster->slot($akey));
ok((grep { $_ == $aowner } @real), 'a real primary serves the other key');

# The seeds: one that takes connections and never answers (it keeps the
# TLS client hello rlock sends it), the intruder, a real primary
my $silent = RlockTest::Recorder->start;
my $bseed = '127.0.0.1:' . $intruder->tls_port;
my $aseed = '127.0.0.1:' . $real[0]->tls_port;

my $node = RlockTest::node('pin', $real[0],
	conf => [ "rlock.topology = 'cluster'",
		"rlock.nodes = '127.0.0.1:" . $silent->port . ",$bseed,$aseed'" ]);

sub status
{
	my ($cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM rlock_status()");
}

# a session that keeps its session locks between statements
my $s = $node->background_psql('postgres');

sub reconf
{
	my (%set) = @_;
	$node->append_conf('postgresql.conf',
		join('', map { "rlock.$_ = '$set{$_}'\n" } sort keys %set));
	$node->reload;
}

# rlock's connections a server has (by their CLIENT SETNAME), and the
# scripts it ran (only rlock runs scripts here)
sub rlock_clients
{
	my ($redis) = @_;
	return scalar(grep { / name=rlock_/ } split /\n/, $redis->cmd('CLIENT', 'LIST'));
}

sub scripts_run
{
	my ($redis) = @_;
	my $stats = $redis->cmd('INFO', 'commandstats');
	my $n = 0;
	$n += $1 while $stats =~ /^cmdstat_eval(?:sha)?:calls=(\d+)/mg;
	return $n;
}

# What the silent seed received from PostgreSQL since the last mark
sub hellos
{
	my ($period) = @_;
	return map { $_->{bytes} }
	  grep { $_->{period} == $period && $_->{comm} =~ /postgres/ }
	  $silent->connections;
}

#---- verify-full alone: the intruder serves its slot ----

ok(RlockTest::wait_for_cluster_map($node, 4),
	'verify-full: the map names four primaries, every connection ready');
is(status('cluster_node'), $bseed, 'the intruder, a seed, is asked for the map');
is($s->query_safe("SELECT rlock_session_try('$bkey')"), 't',
	'a lock of the intruder\'s slot is granted');
is(scalar(@{ $intruder->owners($bkey) }), 1, 'by the intruder: it holds the hash');
is($s->query_safe("SELECT rlock_session_release('$bkey')"), 't',
	'and released there');
cmp_ok(rlock_clients($intruder), '>', 0, 'rlock has connections to the intruder');
my $scripts = scripts_run($intruder);
my @hello = hellos(0);
ok(@hello && substr($hello[0], 0, 1) eq "\x16",
	'the silent seed received a TLS client hello');
ok(!(grep { index($_, $pin) >= 0 } @hello),
	'without the pin, no server name in it (the seed is an address)');

#---- pinned: only certificates carrying the name serve ----

my $period = $silent->mark;
reconf(tls_server_name => $pin);
ok( RlockTest::wait_until(
		sub {
			status('cluster_primaries') == 4
			  && status("coalesce(last_error, '')") =~
			  /certificate verify failed: the server's certificate does not name "\Q$pin\E"/;
		},
		20),
	'pinned: rlock_status() says the intruder\'s certificate lacks the name')
  or diag(status('*'));
like(status('command_connection'), qr/^(down|connecting|securing)$/,
	'and shows a primary without a command connection');
ok(RlockTest::wait_until(sub { status('cluster_node') eq $aseed }, 10),
	'the map is asked of the real seed, not of the intruder')
  or diag(status('cluster_node'));

is($s->query_safe("SELECT rlock_session_try('$akey')"), 't',
	'a real primary serves its key');
is(scalar(@{ $aowner->owners($akey) }), 1, 'and holds the hash');
is($s->query_safe("SELECT rlock_session_release('$akey')"), 't',
	'released there');

my ($rc, $out, $err, $elapsed) =
  RlockTest::timed_psql($node, "SELECT rlock_try('$bkey')");
like($err, qr/ERROR:  58030: could not reach Redis/,
	'a lock of the intruder\'s slot fails with 58030');
like($err,
	qr/DETAIL:  No usable connection to Redis at 127\.0\.0\.1:${\ $intruder->tls_port }: certificate verify failed: the server's certificate does not name "\Q$pin\E"/,
	'the detail names the node and the certificate problem');
cmp_ok($elapsed, '<', 1 + 0.5, 'within rlock.connect_timeout');
ok(RlockTest::wait_until(sub { rlock_clients($intruder) == 0 }, 5),
	'no connection of rlock to the intruder gets past TLS');
is(scripts_run($intruder), $scripts, 'the intruder ran no script of rlock');

@hello = hellos($period);
ok((grep { index($_, $pin) >= 0 } @hello),
	'the pinned name went out as SNI, to the seed too');

#---- behind Sentinel ----

# two standalone servers with the certificates above, and a Sentinel
# for each that names it as the primary "main"
my $sa = RlockTest::Redis->start(
	tls => { cert => RlockTest::TLS::server_cert('primary', "DNS:$pin,IP:127.0.0.1") });
my $sb = RlockTest::Redis->start(tls => { cert => $intruder_cert });
my $names_a = RlockTest::Recorder->start(names_primary => $sa->tls_port);
my $names_b = RlockTest::Recorder->start(names_primary => $sb->tls_port);

reconf(topology => 'sentinel', sentinel_master => 'main',
	nodes => '127.0.0.1:' . $names_b->port, tls_server_name => '');
ok(RlockTest::wait_for_redis($node, 10),
	'Sentinel, verify-full alone: the primary named is used')
  or diag(status('*'));
is($s->query_safe("SELECT rlock_session_try('pin:s')"), 't',
	'a lock is granted');
is(scalar(@{ $sb->owners('pin:s') }), 1, 'by the intruder the Sentinel named');
is($s->query_safe("SELECT rlock_session_release('pin:s')"), 't',
	'and released there');
$scripts = scripts_run($sb);
cmp_ok($scripts, '>', 0, 'scripts ran there');

reconf(tls_server_name => $pin);
ok( RlockTest::wait_until(
		sub {
			status("coalesce(last_error, '')") =~
			  /certificate verify failed: the server's certificate does not name "\Q$pin\E"/;
		},
		10),
	'Sentinel, pinned: rlock_status() says why the primary named is refused')
  or diag(status('*'));
($rc, $out, $err, $elapsed) =
  RlockTest::timed_psql($node, "SELECT rlock_try('pin:s')");
like($err, qr/ERROR:  58030: could not reach Redis/, 'a lock fails with 58030');
like($err,
	qr/DETAIL:  No usable connection to Redis at 127\.0\.0\.1:${\ $sb->tls_port }: certificate verify failed: the server's certificate does not name "\Q$pin\E"/,
	'the detail names the primary and the certificate problem');
ok(RlockTest::wait_until(sub { rlock_clients($sb) == 0 }, 5),
	'no connection of rlock to that server gets past TLS');
is(scripts_run($sb), $scripts, 'it ran no script of rlock');

reconf(nodes => '127.0.0.1:' . $names_a->port);
ok(RlockTest::wait_for_redis($node, 10),
	'Sentinel, pinned: a primary whose certificate carries the name is used')
  or diag(status('*'));
is($s->query_safe("SELECT rlock_session_try('pin:s')"), 't',
	'a lock is granted');
is(scalar(@{ $sa->owners('pin:s') }), 1, 'by that primary');

$s->quit;
$node->stop;
$_->stop for ($names_a, $names_b, $silent);
$_->stop for ($sa, $sb);
$cluster->stop;
done_testing();
