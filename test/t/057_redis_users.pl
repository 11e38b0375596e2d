# rlock's Redis users as doc/configuration.md ("Redis ACL") makes them,
# with the lines read from that page:
#
# - standalone (a primary with a replica, two instances, rlock.database
#   3): with the required and optional lines and +select, locks taken,
#   waited for, released, renewed, checked at commit, with tokens, their
#   holders shown across instances, their state read, forced away, the
#   replica confirming, the fence after lost connections: Redis refused
#   nothing (ACL LOG), and MONITOR saw rlock run every command the lines
#   allow and no other;
# - the required line alone: the same works, and what each optional
#   command gives is lost as documented;
# - the narrower key patterns, with rlock.key_prefix, on names with and
#   without braces: nothing refused;
# - Sentinel: the Sentinels' lines, required and optional, then the
#   required one alone; a missing or group-readable Sentinel password
#   file named by its own setting;
# - Redis Cluster (three primaries with a replica each): the Cluster's
#   lines, sharded pub/sub, a key of a migrating slot (ASK), then classic
#   pub/sub with its addition: nothing refused, every command used; the
#   narrower key patterns without those of the channels.

use strict;
use warnings;

use File::Temp ();
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::ACL;
use RlockTest::Cluster;
use RlockTest::Redis;
use RlockTest::Sentinel;

plan skip_all =>
  'the commands rlock sends do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $user = RlockTest::ACL::user();
my @data = RlockTest::ACL::lines('data');        # required, optional, SELECT
my @sent = RlockTest::ACL::lines('sentinel');    # required, optional
my @clus = RlockTest::ACL::lines('cluster');     # required, optional, classic
my ($narrow) = RlockTest::ACL::lines('narrow');

sub status
{
	my ($node, $cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM rlock_status()");
}

#---- what Redis ran, and what it refused ----

# Everything a MONITOR connection $mon of $server saw until now: one
# [address, command, first argument, second] per command ("lua" for the
# commands of scripts).  A marker the test sends ends the reading.
sub monitored
{
	my ($server, $mon) = @_;
	my $mark = 'rlocktest-mark-' . int(rand(1e9));
	$server->cmd('ECHO', $mark);
	my @seen;
	while (1)
	{
		my $line = $mon->read_reply(10);
		last if !ref $line && index($line, $mark) >= 0;
		next unless !ref $line && $line =~ /^[\d.]+ \[\d+ (\S+)\] (.*)$/;
		my ($addr, $rest) = ($1, $2);
		my @args = map { s/\\(.)/$1/gr } ($rest =~ /"((?:[^"\\]|\\.)*)"/g);
		push @seen, [ $addr, @args[ 0 .. 2 ] ];
	}
	return @seen;
}

# Does Redis know $cmd as a command with subcommands (CLIENT, SCRIPT)?
my %container;
sub container
{
	my ($server, $cmd) = @_;
	return $container{$cmd} //= do {
		my $info = $server->cmd('COMMAND', 'INFO', $cmd);
		ref $info->[0] eq 'ARRAY' && ref $info->[0][9] eq 'ARRAY'
		  && @{ $info->[0][9] } > 0 ? 1 : 0;
	};
}

# The commands rlock ran, as ACL rules name them ("client|setname"), from
# what monitored() returned: those of its connections (the ones that gave
# themselves an rlock_ name) and of scripts.
sub rlock_commands
{
	my ($server, @seen) = @_;
	my %ours = map { $_->[0] => 1 } grep {
		lc $_->[1] eq 'client' && lc($_->[2] // '') eq 'setname'
		  && ($_->[3] // '') =~ /^rlock_/
	} @seen;
	my %cmds;
	for (@seen)
	{
		my ($addr, $cmd, $sub) = @$_;
		next unless $addr eq 'lua' || $ours{$addr};
		$cmd = lc $cmd;
		# no ACL rule allows or denies AUTH: every connection may send it
		next if $cmd eq 'auth';
		$cmd .= '|' . lc $sub if container($server, $cmd) && defined $sub;
		$cmds{$cmd} = 1;
	}
	return %cmds;
}

# How often $server ran $cmd, for anyone (INFO commandstats).  CLIENT
# KILL is an admin command, and MONITOR never shows those.
sub calls
{
	my ($server, $cmd) = @_;
	return $server->cmd('INFO', 'commandstats') =~
	  /^cmdstat_\Q$cmd\E:calls=(\d+)/m ? $1 : 0;
}

# rlock ran exactly the commands @lines allow
sub ran_exactly
{
	my ($what, $cmds, @lines) = @_;
	my @allowed = RlockTest::ACL::commands(@lines);
	my %allowed = map { $_ => 1 } @allowed;
	my @unused = grep { !$cmds->{$_} } @allowed;
	my @other = grep { !$allowed{$_} } sort keys %$cmds;
	ok(!@unused && !@other,
		"$what: rlock ran every command the lines allow, and no other")
	  or diag("allowed, never run: @unused\nrun, not allowed: @other");
}

# The entries of an ACL LOG reply, as "reason object (context, user)".
sub log_entries
{
	my ($log) = @_;
	die "ACL LOG: $log->{error}" if ref $log eq 'HASH';
	return map {
		my %e = @$_;
		"$e{reason} $e{object} ($e{context}, user $e{username})"
	} @$log;
}

# What $server refused (its ACL LOG).
sub refusals { return log_entries($_[0]->cmd('ACL', 'LOG')) }

# The commands of refusals (other refusals, of keys or channels, as
# "key ..." or "channel ..."), sorted, once each.
sub refused_commands
{
	my %r;
	for (@_)
	{
		my ($reason, $object) = split / /;
		$r{ $reason eq 'command' ? $object : "$reason $object" } = 1;
	}
	return sort keys %r;
}

# What an rlock user's connections to $server are named (CLIENT LIST).
sub client_names
{
	my ($server) = @_;
	return sort map { /\bname=(\S*) .*\buser=\Q$user\E\b/ ? $1 : () }
	  split /\n/, $server->cmd('CLIENT', 'LIST');
}

#---- standalone: the required and optional lines, and SELECT ----

my $primary = RlockTest::Redis->start(acl => [ @data[ 0 .. 2 ] ]);
my $replica = RlockTest::Redis->start(acl => 0,
	args => [ '--replicaof', '127.0.0.1', $primary->port ]);
ok( RlockTest::wait_until(
		sub {
			($replica->cmd('INFO', 'replication') // '') =~
			  /master_link_status:up/;
		},
		20),
	'a replica attached');
my $mon = $primary->monitor;
my $data_pw = RlockTest::ACL::password_file('data');

sub data_node
{
	my ($name, $redis, @conf) = @_;
	return RlockTest::node($name, $redis,
		conf => [
			"rlock.username = '$user'",
			"rlock.password_file = '$data_pw'",
			"rlock.watchdog_timeout = '1s'",
			@conf ]);
}
my $na = data_node('users_a', $primary, 'rlock.database = 3',
	"rlock.instance_name = 'users-a'");
my $nb = data_node('users_b', $primary, 'rlock.database = 3');
ok(RlockTest::wait_for_redis($na, 15) && RlockTest::wait_for_redis($nb, 15),
	'both instances lock as the documented user');
ok(RlockTest::wait_until(
		sub { status($na, 'sync_connection, replicas') eq 'ready|1' }, 15),
	'the replica is found, and acquisitions wait for it');
$primary->cmd('SELECT', 3);

# A shared round on $key: a session of $n1 holding it exclusively and
# shared, a writer of $n2 waiting; the exclusive hold given back leaves
# the lock to the reader (HDEL), the shared one frees it (the timeout key
# and the field go) and wakes the writer.
sub shared_round
{
	my ($n1, $n2, $key, $what) = @_;
	my $h = $n1->background_psql('postgres');
	is($h->query_safe("SELECT rlock_session_try('$key'), rlock_session_try_shared('$key')"),
		't|t', "$what: $key held exclusively and shared");
	my $w = $n2->background_psql('postgres', on_error_stop => 0);
	RlockTest::send_query($w, "SELECT rlock_try('$key', '20 s') AS got;");
	ok(RlockTest::waiting_in_sql($n2, $key), "$what: $key waited for");
	is($h->query_safe("SELECT rlock_session_release('$key'), rlock_held_shared('$key')"),
		't|1', "$what: the exclusive hold given back, the shared one kept");
	is($h->query_safe("SELECT rlock_session_release_shared('$key')"), 't',
		"$what: the shared one given back");
	my ($got) = RlockTest::collect($w);
	is($got, 't', "$what: the writer gets $key");
	$w->quit;
	$h->quit;
}

# A fair round on $key: a session of $n1 holds it fair; one of $n1
# queues with a short wait, one of $n2 behind it; the first gives up (its
# entry goes, the one behind loses its wait); the release wakes the head
# on its own channel, which takes the lock and leaves the queue.
sub fair_round
{
	my ($n1, $n2, $key, $what) = @_;
	my $h = $n1->background_psql('postgres');
	is($h->query_safe("SELECT rlock_session_try_fair('$key')"), 't',
		"$what: $key held fair");
	my $short = $n1->background_psql('postgres', on_error_stop => 0);
	RlockTest::send_query($short, "SELECT rlock_try_fair('$key', '1 s') AS got;");
	ok(RlockTest::waiting_in_sql($n1, $key), "$what: $key queued for with a short wait");
	my $w = $n2->background_psql('postgres', on_error_stop => 0);
	RlockTest::send_query($w, "SELECT rlock_try_fair('$key', '20 s') AS got;");
	my $waiting = $n1 == $n2 ? 2 : 1;
	ok(RlockTest::wait_until(
			sub {
				$n2->safe_psql('postgres',
					"SELECT count(*) FROM rlock_locks WHERE key = '$key' AND state = 'waiting'")
				  == $waiting;
			},
			10),
		"$what: and behind it for longer");
	my ($got) = RlockTest::collect($short);
	is($got, 'f', "$what: the short wait gives up");
	is($h->query_safe("SELECT rlock_session_release_fair('$key')"), 't',
		"$what: released");
	($got) = RlockTest::collect($w);
	is($got, 't', "$what: the queue's head gets $key");
	$_->quit for $short, $w, $h;
}

# A semaphore and a latch on $name: permits set and added, one taken by a
# session of $n1, a waiter of $n2 woken by its release; a latch counted
# down to zero wakes a waiter of $n2.
sub permits_round
{
	my ($n1, $n2, $name, $what) = @_;
	is($n1->safe_psql('postgres',
			"SELECT rlock_set_permits('$name', 0), rlock_add_permits('$name', 1)"),
		't|1', "$what: semaphore $name set");
	my $h = $n1->background_psql('postgres');
	is($h->query_safe("SELECT rlock_session_try_permits('$name')"), 't',
		"$what: its permit taken");
	my $w = $n2->background_psql('postgres', on_error_stop => 0);
	RlockTest::send_query($w, "SELECT rlock_try_permits('$name', 1, '20 s') AS got;");
	ok(RlockTest::waiting_in_sql($n2, $name), "$what: a waiter for a permit");
	is($h->query_safe("SELECT rlock_session_release_permits('$name')"), 't',
		"$what: the permit released");
	my ($got) = RlockTest::collect($w);
	is($got, 't', "$what: the waiter gets it");
	is($n1->safe_psql('postgres', "SELECT rlock_latch_set('$name:l', 2)"), 't',
		"$what: a latch set");
	RlockTest::send_query($w, "SELECT rlock_latch_wait('$name:l', '20 s') AS got;");
	ok(RlockTest::waiting_in_sql($n2, "$name:l"), "$what: a waiter for the latch");
	is($n1->safe_psql('postgres',
			"SELECT rlock_latch_count_down('$name:l'), rlock_latch_count_down('$name:l')"),
		'1|0', "$what: counted down to zero");
	($got) = RlockTest::collect($w);
	is($got, 't', "$what: the latch's waiter goes on");
	$_->quit for $w, $h;
}

# a lock with its waiter: busy, subscribed, woken by the release
my $s1 = $na->background_psql('postgres');
is($s1->query_safe("SELECT rlock_session_try('acl:k')"), 't', 'a lock is taken');
ok($s1->query_safe("SELECT rlock_session_try_token('acl:t')") > 0, 'a fencing token');
my $s2 = $nb->background_psql('postgres', on_error_stop => 0);
RlockTest::send_query($s2, "SELECT rlock_try('acl:k', '20 s') AS got;");
ok(RlockTest::waiting_in_sql($nb, 'acl:k'), 'another instance waits for it');
ok( RlockTest::wait_until(
		sub {
			$nb->safe_psql('postgres',
				"SELECT holder, instance FROM rlock_holder('acl:k')") eq
			  'rlock|users-a';
		},
		15),
	"rlock_holder() names the holding instance, from its registry");
is($nb->safe_psql('postgres',
		"SELECT rlock_is_locked('acl:k'), rlock_ttl('acl:k') > '0'"),
	't|t', 'rlock_is_locked and rlock_ttl read it');
ok(RlockTest::wait_for_renewal($primary, 'acl:k', 5), 'its lease is renewed');
is($s1->query_safe('SELECT rlock_release_all()'), '2', 'both released');
my ($got) = RlockTest::collect($s2);
is($got, 't', 'the waiter is woken and gets the lock');
$s2->quit;

# a hand-off within an instance whose grants wait for no replica, and
# whose commits trust client-side tracking: one transfer script, which
# asks PUBSUB NUMSUB who else listens (no renewal meanwhile: it would
# untrack the holder's key)
my $nx = data_node('users_x', $primary, 'rlock.database = 3',
	'rlock.sync_replicas = off', "rlock.verify_window = '1s'",
	"rlock.watchdog_timeout = '10min'");
ok(RlockTest::wait_for_redis($nx, 15), 'a third instance, not synced, locks');
ok(RlockTest::wait_until(
		sub { ($primary->cmd('CLIENT', 'LIST') // '') =~ /name=rlock_command .*flags=\S*t/ }, 15),
	'its command connection has tracking on');
my $calls_numsub = calls($primary, 'pubsub|numsub');
my $x1 = $nx->background_psql('postgres');
my $x2 = $nx->background_psql('postgres', on_error_stop => 0);
$x1->query_safe('BEGIN');
$x1->query_safe("SELECT rlock_try('acl:x')");
$x2->query_safe('BEGIN');
RlockTest::send_query($x2, "SELECT rlock_try('acl:x', '20 s') AS got;");
ok(RlockTest::waiting_in_sql($nx, 'acl:x'), 'a waiter of the same instance');
$x1->query_safe('COMMIT');
($got) = RlockTest::collect($x2);
is($got, 't', 'the waiter gets the lock');
$x2->query_safe('COMMIT');
cmp_ok(calls($primary, 'pubsub|numsub'), '>', $calls_numsub,
	'handed over by a transfer (PUBSUB NUMSUB ran)');
$_->quit for ($x1, $x2);
$nx->stop;

# shared holds: a session holding a key both ways, the other instance's
# writer waiting, the exclusive hold given back (the lock left to the
# reader), then the shared one (the waiter woken)
shared_round($na, $nb, 'acl:sh', 'standalone');
fair_round($na, $nb, 'acl:fa', 'standalone');
permits_round($na, $nb, 'acl:pe', 'standalone');
permits_round($na, $nb, '{acl}:pb', 'standalone');

# a lock forced away
$s1->query_safe("SELECT rlock_session_try('acl:f')");
is($nb->safe_psql('postgres', "SELECT rlock_force_release('acl:f')"), 't',
	'rlock_force_release removes a lock');
$s1->quit;

# every connection lost at once: the new ones fence the old
my $kills = calls($primary, 'client|kill');
ok($primary->cmd('CLIENT', 'KILL', 'USER', $user) >= 6,
	"the instances' connections are closed");
ok(RlockTest::wait_for_redis($na, 10) && RlockTest::wait_for_redis($nb, 10),
	'both connect again');
my $fences = calls($primary, 'client|kill') - $kills - 1;    # less the test's own
ok( RlockTest::wait_until(
		sub { $primary->cmd('PUBSUB', 'NUMSUB', 'redisson_lock__channel:{acl:k}')->[1] == 0 }, 10),
	'nobody is subscribed to the lock channel any more');

is_deeply([ refusals($primary) ], [], 'Redis refused rlock nothing (ACL LOG)');
is(status($na, "redis_version IS NOT NULL, redis_role"), 't|master',
	'rlock_status() shows the version (INFO) and the role (ROLE)');
my $named = join(',', sort map { ("rlock_$_") x 2 } qw(command subscriber sync));
ok(RlockTest::wait_until(sub { join(',', client_names($primary)) eq $named }, 10),
	'the connections carry their names (CLIENT SETNAME)')
  or diag(join(',', client_names($primary)));
my %ran = rlock_commands($primary, monitored($primary, $mon));
$ran{'client|kill'} = 1 if $fences > 0;
ran_exactly('standalone', \%ran, @data[ 0 .. 2 ]);
unlike(slurp_file($na->logfile),
	qr/could not close its earlier|could not register|cannot tell whether Redis|ROLE was refused/,
	'no optional command was refused');

#---- standalone: the required line alone ----

# The user loses the optional commands; every connection is made again.
RlockTest::ACL::apply($primary, $data[0], $data[2]);
$primary->cmd('ACL', 'LOG', 'RESET');
my $log_from = -s $na->logfile;
$primary->cmd('CLIENT', 'KILL', 'USER', $user);
ok(RlockTest::wait_for_redis($na, 10) && RlockTest::wait_for_redis($nb, 10),
	'required line only: both instances lock');
$s1 = $na->background_psql('postgres');
$s1->query_safe("SELECT rlock_session_try('req:k')");
$s2 = $nb->background_psql('postgres', on_error_stop => 0);
RlockTest::send_query($s2, "SELECT rlock_try('req:k', '20 s') AS got;");
ok(RlockTest::waiting_in_sql($nb, 'req:k'), 'required line only: a waiter');
is($nb->safe_psql('postgres',
		"SELECT owner IS NOT NULL, holder, instance IS NULL FROM rlock_holder('req:k')"),
	't|redisson|t',
	"required line only: rlock_holder() shows the owner, not the instance (HMGET)");
$s1->query_safe('SELECT rlock_release_all()');
($got) = RlockTest::collect($s2);
is($got, 't', 'required line only: the waiter is woken by the release');
$s2->quit;
$s1->query_safe("SELECT rlock_session_try('req:f')");
is($nb->safe_psql('postgres', "SELECT rlock_force_release('req:f')"), 't',
	'required line only: a lock forced away');
$s1->quit;
ok( RlockTest::wait_until(
		sub {
			status($na, 'sync_wait') eq
			  'nothing: replicas not known (ROLE and INFO refused)';
		},
		10),
	'required line only: without ROLE and INFO, auto waits for no replica');
is(status($na, 'redis_version IS NULL'), 't', 'and shows no version (INFO)');
my $log = slurp_file($na->logfile, $log_from);
like($log, qr/WARNING:  rlock cannot tell whether Redis at \S+ has replicas/,
	'with a WARNING');
like($log, qr/could not close its earlier connections/,
	'the missing fence is logged (CLIENT ID, CLIENT KILL, INFO)');
# (command and subscriber connections of both instances: no replica is
# known, so no sync connection)
ok(RlockTest::wait_until(sub { join(',', client_names($primary)) eq ',,,' }, 10),
	'the connections have no names (CLIENT SETNAME)')
  or diag(join(',', client_names($primary)));
# Redis refused each optional command but CLIENT KILL, which rlock does
# not send without INFO (the server's run_id), CLIENT TRACKING, which
# it does not send without the subscriber's CLIENT ID, and PUBSUB NUMSUB,
# which only a transfer sends (there is none without tracking), and
# nothing else
my @refused = refusals($primary);
is_deeply([ refused_commands(@refused) ],
	[ grep { $_ ne 'client|kill' && $_ ne 'client|tracking' && $_ ne 'pubsub|numsub' }
		  RlockTest::ACL::commands($data[1]) ],
	'required line only: Redis refused the optional commands, no other')
  or diag(join("\n", @refused));

#---- narrower key patterns, under a key prefix ----

RlockTest::ACL::apply($primary, @data[ 0 .. 2 ], $narrow);
$primary->cmd('ACL', 'LOG', 'RESET');
$_->append_conf('postgresql.conf', "rlock.key_prefix = 'app:'") for $na, $nb;
$_->reload for $na, $nb;
for my $key ('n:k', 'n:{k}')
{
	$s1 = $na->background_psql('postgres');
	ok($s1->query_safe("SELECT rlock_session_try_token('$key')") > 0,
		"narrow patterns: $key taken with a token");
	$s2 = $nb->background_psql('postgres', on_error_stop => 0);
	RlockTest::send_query($s2, "SELECT rlock_try('$key', '20 s') AS got;");
	ok(RlockTest::waiting_in_sql($nb, $key), "narrow patterns: $key waited for");
	ok( RlockTest::wait_until(
			sub {
				$nb->safe_psql('postgres',
					"SELECT instance, rlock_ttl('$key') > '0' FROM rlock_holder('$key')") eq
				  'users-a|t';
			},
			15),
		"narrow patterns: $key read, with its holder's instance");
	$s1->query_safe('SELECT rlock_release_all()');
	($got) = RlockTest::collect($s2);
	is($got, 't', "narrow patterns: $key handed to the waiter");
	$s2->quit;
	$s1->query_safe("SELECT rlock_session_try('$key')");
	is($nb->safe_psql('postgres', "SELECT rlock_force_release('$key')"), 't',
		"narrow patterns: $key forced away");
	$s1->quit;
	shared_round($na, $nb, "s$key", 'narrow patterns');
	fair_round($na, $nb, "f$key", 'narrow patterns');
	permits_round($na, $nb, "p$key", 'narrow patterns');
}
is($primary->cmd('EXISTS', 'redisson_lock_token:app:n:{k}'), 1,
	'the token counters were under the prefix too');
is_deeply([ refusals($primary) ], [], 'narrow patterns: Redis refused nothing');
$na->stop;
$nb->stop;
$replica->stop;
$primary->stop;

#---- Sentinel ----

# The Sentinels start with the required line alone; the optional one
# comes later.
my $dep = RlockTest::Sentinel->start(replicas => 1, sentinels => 3, acl => 1);
for my $j (0 .. 2)
{
	$dep->sentinel_cmd($j, 'ACL', 'SETUSER', $user, @{ $sent[0] });
	$dep->sentinel_cmd($j, 'ACL', 'LOG', 'RESET');
}
my $sentinel_pw = RlockTest::ACL::password_file('sentinel');
my $ns = data_node('users_s', $dep->data_nodes->[0],
	"rlock.topology = 'sentinel'",
	"rlock.nodes = '" . $dep->nodes_setting . "'",
	"rlock.sentinel_master = 'main'",
	"rlock.sentinel_username = '$user'",
	"rlock.sentinel_password_file = '$sentinel_pw'");

# The Sentinel rlock asks now, and the lines of its CLIENT LIST that are
# rlock's user's.
sub asked
{
	my $port = (status($ns, 'sentinel') =~ /:(\d+)$/)[0] // 0;
	my ($i) = grep { ($dep->sentinel_ports)[$_] == $port } 0 .. 2;
	return $i;
}
sub rlock_clients
{
	my ($i) = @_;
	return grep { /\buser=\Q$user\E\b/ }
	  split /\n/, $dep->sentinel_cmd($i, 'CLIENT', 'LIST');
}
sub sentinel_refusals
{
	return map { log_entries($dep->sentinel_cmd($_, 'ACL', 'LOG')) } @_;
}

ok(RlockTest::wait_for_redis($ns, 15),
	'Sentinel, required line only: a lock, through the Sentinels');
my $i = asked();
is(status($ns, 'sentinels_known, sentinels_reachable'), '3|1',
	'Sentinel, required line only: no view of the peers (SENTINEL SENTINELS)');
ok(!grep({ /\bsub=1\b/ || !/\bname= / } rlock_clients($i)),
	'Sentinel, required line only: no subscription, no names');
my @refused_s = sentinel_refusals($i);
is_deeply([ refused_commands(@refused_s) ],
	[ RlockTest::ACL::commands($sent[1]) ],
	'Sentinel, required line only: the optional commands were refused, no other')
  or diag(join("\n", @refused_s));

# Both lines; the connections to the Sentinel asked are closed, and rlock
# asks the next one
for my $j (0 .. 2)
{
	$dep->sentinel_cmd($j, 'ACL', 'SETUSER', $user, @{ $sent[1] });
	$dep->sentinel_cmd($j, 'ACL', 'LOG', 'RESET');
}
$dep->sentinel_cmd($i, 'CLIENT', 'KILL', 'USER', $user);
# (the Sentinel whose connections were closed counts as unreachable until
# rlock tries it again; the third is counted as the asked one sees it)
ok( RlockTest::wait_until(
		sub { status($ns, 'sentinels_reachable') > 1 }, 10),
	'Sentinel: the peers as the asked Sentinel sees them');
$i = asked();
ok( RlockTest::wait_until(
		sub {
			my @c = rlock_clients($i);
			grep({ /\bname=rlock_sentinel_watch .*\bsub=1\b/ } @c)
			  && grep({ /\bname=rlock_sentinel / } @c);
		},
		10),
	'Sentinel: subscribed to +switch-master, the connections named');
my $s = $ns->background_psql('postgres');
is($s->query_safe("SELECT rlock_session_try('s:k')"), 't', 'Sentinel: a lock');
$s->quit;
is_deeply([ sentinel_refusals(0 .. 2) ], [],
	'Sentinel: the Sentinels refused nothing');
is_deeply([ map { refusals($_) } @{ $dep->data_nodes } ], [],
	'Sentinel: the data nodes refused nothing');

# the Sentinels' password file, missing or readable by others: its own
# setting named, not the path, and not rlock.password_file
sub sentinel_pw_refused
{
	my ($path, $reason, $what) = @_;
	$ns->safe_psql('postgres',
		"ALTER SYSTEM SET rlock.sentinel_password_file = '$path'; SELECT pg_reload_conf()");
	my $err = '';
	ok( RlockTest::wait_until(
			sub {
				(undef, undef, $err) = $ns->psql('postgres',
					"\\set VERBOSITY verbose\nSELECT rlock_try('spw:k')");
				$err =~ /58030/ && $err =~ $reason;
			},
			10),
		"Sentinel password file $what: 58030 naming rlock.sentinel_password_file")
	  or diag($err);
	unlike($err, qr/\Q$path\E|rlock\.password_file/, "$what: not the path, nor the other setting");
	like(status($ns, 'last_error'), $reason, "$what: rlock_status() says so");
}
my $pwdir = File::Temp::tempdir(CLEANUP => 1);
sentinel_pw_refused("$pwdir/missing/sentinel.pw",
	qr/could not read the password file \(rlock\.sentinel_password_file\): No such file/,
	'missing');
my $loose = RlockTest::password_file($pwdir, RlockTest::ACL::password('sentinel'));
chmod 0640, $loose;
sentinel_pw_refused($loose,
	qr/the password file \(rlock\.sentinel_password_file\) has group or world access/,
	'readable by its group');
$ns->stop;
$dep->stop;

#---- Redis Cluster ----

my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 1, acl => 1);
my @primaries = $cluster->primaries;
my %mons = map { $_->port => $_->monitor } @primaries;
my $cluster_pw = RlockTest::ACL::password_file('cluster');
my $nc = RlockTest::node('users_c', $primaries[0],
	conf => [
		"rlock.topology = 'cluster'",
		"rlock.nodes = '" . join(',', map { '127.0.0.1:' . $_->port } @primaries[ 0, 1 ]) . "'",
		"rlock.username = '$user'",
		"rlock.password_file = '$cluster_pw'",
		"rlock.watchdog_timeout = '1s'" ]);
ok(RlockTest::wait_for_cluster_map($nc, 3), 'Cluster: the slot map, every primary ready');
is(status($nc, 'cluster_pubsub'), 'sharded', 'Cluster: sharded pub/sub (PUBSUB SHARDNUMSUB)');

# keys of every primary
my %key_of;
for my $n (0 .. 400)
{
	my $owner = $cluster->owner($cluster->slot("ck:$n"));
	$key_of{ $owner->port } //= "ck:$n";
}
my @keys = map { $key_of{ $_->port } } @primaries;

sub wake
{
	my ($key, $what) = @_;
	my $h = $nc->background_psql('postgres');
	$h->query_safe("SELECT rlock_session_try('$key')");
	my $w = $nc->background_psql('postgres', on_error_stop => 0);
	RlockTest::send_query($w, "SELECT rlock_try('$key', '20 s') AS got;");
	ok(RlockTest::waiting_in_sql($nc, $key), "Cluster, $what: $key waited for");
	$h->query_safe('SELECT rlock_release_all()');
	my ($got) = RlockTest::collect($w);
	is($got, 't', "Cluster, $what: the waiter is woken");
	$w->quit;
	$h->quit;
}

$s = $nc->background_psql('postgres');
for my $key (@keys)
{
	ok($s->query_safe("SELECT rlock_session_try_token('$key')") > 0,
		"Cluster: $key taken, with a token");
	is($nc->safe_psql('postgres',
			"SELECT rlock_is_locked('$key'), instance IS NOT NULL FROM rlock_holder('$key')"),
		't|t', "Cluster: $key read");
}
# (a primary's connections are made when a key of it is used)
ok(RlockTest::wait_until(sub { status($nc, 'sync_connection') eq 'ready' }, 15),
	'Cluster: acquisitions wait for the replicas');
ok(RlockTest::wait_for_renewal($cluster->owner($cluster->slot($keys[0])), $keys[0], 5),
	'Cluster: leases renewed');
$s->query_safe('SELECT rlock_release_all()');
$s->query_safe("SELECT rlock_session_try('$keys[1]')");
is($nc->safe_psql('postgres', "SELECT rlock_force_release('$keys[1]')"), 't',
	'Cluster: a lock forced away');
$s->quit;
wake($keys[2], 'sharded');
shared_round($nc, $nc, 'cs:k', 'Cluster');
fair_round($nc, $nc, 'cf:k', 'Cluster');
permits_round($nc, $nc, 'cp:k', 'Cluster');

# a key of a slot that is migrating: ASK, and ASKING on the new node
my ($ask_key) = grep { $cluster->owner($cluster->slot($_)) == $primaries[0] }
  map { "ask:$_" } 0 .. 400;
my $ask_slot = $cluster->slot($ask_key);
$cluster->migrate_begin($ask_slot, $primaries[1]);
is($nc->safe_psql('postgres', "SELECT rlock_try('$ask_key')"), 't',
	'Cluster: a key of a migrating slot is taken on its new node');
$cluster->migrate_end($ask_slot);

# the connections lost: the new ones fence the old
my $kills_before = 0;
$kills_before += calls($_, 'client|kill') for @primaries;
$_->cmd('CLIENT', 'KILL', 'USER', $user) for @primaries;
ok(RlockTest::wait_for_cluster_map($nc, 3) && RlockTest::wait_for_redis($nc, 10),
	'Cluster: connected again');
my $cluster_fences = -$kills_before - @primaries;    # less the test's own
$cluster_fences += calls($_, 'client|kill') for @primaries;

# classic pub/sub, with what the page adds for it
RlockTest::ACL::apply($_, $clus[2]) for $cluster->nodes;
$nc->append_conf('postgresql.conf', "rlock.cluster_pubsub = 'classic'");
$nc->reload;
ok(RlockTest::wait_until(sub { status($nc, 'cluster_pubsub') eq 'classic' }, 10),
	'Cluster: classic pub/sub');
wake($keys[0], 'classic');
ok( RlockTest::wait_until(
		sub { $primaries[0]->cmd('PUBSUB', 'NUMSUB', "redisson_lock__channel:{$keys[0]}")->[1] == 0 }, 10),
	'Cluster: unsubscribed');

is_deeply([ map { refusals($_) } $cluster->nodes ], [],
	'Cluster: Redis refused rlock nothing (ACL LOG)');
my %cluster_ran;
for my $p (@primaries)
{
	my %r = rlock_commands($p, monitored($p, $mons{ $p->port }));
	$cluster_ran{$_} = 1 for keys %r;
}
$cluster_ran{'client|kill'} = 1 if $cluster_fences > 0;
ran_exactly('Cluster', \%cluster_ran, @clus[ 0 .. 2 ]);

# the narrower key patterns in a cluster, without those of the channels
# (the scripts do not declare them as keys there), sharded pub/sub again
my @cluster_narrow = grep { !/^~redisson_lock__channel:/ } @$narrow;
RlockTest::ACL::apply($_, @clus[ 0 .. 1 ], \@cluster_narrow) for $cluster->nodes;
$_->cmd('ACL', 'LOG', 'RESET') for $cluster->nodes;
$nc->append_conf('postgresql.conf',
	"rlock.cluster_pubsub = 'auto'\nrlock.key_prefix = 'app:'");
$nc->reload;
ok(RlockTest::wait_until(sub { status($nc, 'cluster_pubsub') eq 'sharded' }, 10),
	'Cluster: sharded pub/sub again');
for my $key ('n:k', 'n:{k}')
{
	$s = $nc->background_psql('postgres');
	ok($s->query_safe("SELECT rlock_session_try_token('$key')") > 0,
		"Cluster, narrow patterns: $key taken with a token");
	is($nc->safe_psql('postgres',
			"SELECT instance IS NOT NULL FROM rlock_holder('$key')"),
		't', "Cluster, narrow patterns: $key read");
	$s->query_safe('SELECT rlock_release_all()');
	wake($key, 'narrow patterns');
	$s->query_safe("SELECT rlock_session_try('$key')");
	is($nc->safe_psql('postgres', "SELECT rlock_force_release('$key')"), 't',
		"Cluster, narrow patterns: $key forced away");
	$s->quit;
	shared_round($nc, $nc, "s$key", 'Cluster, narrow patterns');
	fair_round($nc, $nc, "f$key", 'Cluster, narrow patterns');
	permits_round($nc, $nc, "p$key", 'Cluster, narrow patterns')
	  unless $key =~ /\{/;
}
is_deeply([ map { refusals($_) } $cluster->nodes ], [],
	'Cluster, narrow patterns: Redis refused nothing');

$nc->stop;
$cluster->stop;
done_testing();
