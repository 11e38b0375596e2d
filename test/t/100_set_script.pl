# The first round of a set in one command (acquire_set.lua), watched with
# MONITOR:
#
# - a set of free keys the session does not hold is taken with one
#   EVALSHA of acquire_set naming every key in the set's order, and no
#   other acquire; Redis has each key as acquire.lua leaves it (the
#   owner's count 1, "mode" = "write", the lease), the commit gives back
#   all of them;
# - a busy member: that one EVALSHA and nothing else for the free ones
#   (nothing written, nothing given back); with a wait, the call waits for
#   the busy member alone and then takes the rest one by one;
# - sets it does not serve are taken member by member: a key the session
#   holds already, shared keys, more than 16 keys;
# - a key of another type fails the call as a single acquire fails, and
#   leaves nothing;
# - a member deleted in Redis fails the commit (client-side tracking does
#   not vouch for holds the one command took);
# - its reply lost with the connection (Redis asleep beyond
#   rlock.command_timeout): the keys are taken one by one on the new
#   connection and counted once; a call cancelled meanwhile leaves nothing;
#   a grant that comes after its backend gave up (Redis stopped, the
#   connection kept) is handed back, every key of it;
# - replicas to confirm (rlock.sync_replicas): a WAIT follows the one
#   command; a replica that does not confirm in time fails the call and
#   undoes every key;
# - a Redis Cluster: keys of one slot in one command on their primary,
#   confirmed by its replica; keys of several slots member by member; a
#   set and a key of a slot migrating to a primary not used yet, asked
#   for there (ASK) and confirmed by its replica.
use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'sets do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my %sha = map {
	$_ => sha1_hex(RlockTest::script_text(
			($ENV{TESTDIR} // '.') . "/src/kinds/plain/$_.lua"))
} qw(acquire acquire_set);

my $redis =
  RlockTest::Redis->start(args => [ '--enable-debug-command', 'local' ]);
my $node = RlockTest::node('set_script', $redis,
	command_timeout => '300ms',
	connect_timeout => '3s',
	conf => [ 'log_min_messages = warning', 'rlock.sync_replicas = off' ]);
my $other = RlockTest::node('set_script_b', $redis,
	conf => [ 'log_min_messages = warning' ]);

# The acquire scripts MONITOR shows in @lines, each as
# [kind ('set' or 'one'), client, keys...], kind 'set' for acquire_set.
sub acquires
{
	my @ran;
	for my $line (@_)
	{
		next unless $line =~ /^[\d.]+ \[\d+ ([\d.:]+)\] "EVALSHA" (.*)$/;
		my $client = $1;
		my @a = $2 =~ /"((?:[^"\\]|\\.)*)"/g;
		my @keys = @a[ 2 .. 1 + $a[1] ];
		push @ran, [ 'set', $client, @keys ] if $a[0] eq $sha{acquire_set};
		push @ran, [ 'one', $client, $keys[0] ] if $a[0] eq $sha{acquire};
	}
	return @ran;
}

# Run $sql in session $s; returns its output, its error output and the
# acquires Redis ran meanwhile (as acquires() gives them).
sub watched
{
	my ($mon, $s, $sql) = @_;
	$mon->drain(0.05);
	$s->{stderr} = '';
	my $out = $s->query($sql);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ($out, $err, [ acquires($mon->drain(0.2)) ]);
}

sub summary
{
	return join(' | ', map { join(' ', $_->[0], @$_[ 2 .. $#$_ ]) } @{ $_[0] });
}

sub present
{
	my $r = ref $_[0] ? shift : $redis;
	return scalar grep { $r->cmd('EXISTS', $_) } @_;
}

my $mon = $redis->monitor;
my $s = RlockTest::session($node);
my $owner;

#---- one command for a set of free keys ----

{
	my ($out, $err, $ran) = watched($mon, $s,
		"BEGIN; SELECT rlock_try_set('{ss:c,ss:a,ss:b}');");
	is($out, 't', 'a set of three free keys is taken');
	is(summary($ran), 'set ss:a ss:b ss:c',
		'with one acquire_set naming the keys in order, and no other acquire');
	$owner = $s->query_safe(
		"SELECT owner FROM rlock_locks WHERE key = 'ss:a' AND pid = $s->{rlock_pid}");
	for my $k (qw(ss:a ss:b ss:c))
	{
		my %h = @{ $redis->cmd('HGETALL', $k) };
		is_deeply(\%h, { $owner => 1, mode => 'write' },
			"$k: the owner once, mode write");
		my $ttl = $redis->cmd('PTTL', $k);
		ok($ttl > 0 && $ttl <= 30000, "$k: with the watchdog's lease ($ttl ms)");
	}
	is($s->query_safe(
		"SELECT string_agg(key || '=' || count, ',' ORDER BY key) FROM rlock_locks WHERE pid = $s->{rlock_pid}"),
		'ss:a=1,ss:b=1,ss:c=1', 'rlock_locks shows the three holds');
	is($s->query_safe("SELECT rlock_held('ss:b')"), 1, 'rlock_held counts one');
	$s->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { present(qw(ss:a ss:b ss:c)) == 0 }, 5),
		'the commit gives back all three');

	# not vouched for by tracking: the commit asks Redis, and sees a loss
	($out, $err, $ran) = watched($mon, $s,
		"BEGIN; SELECT rlock_try_set('{ss:d,ss:e}');");
	is(summary($ran), 'set ss:d ss:e', 'another set in one command');
	$redis->cmd('DEL', 'ss:e');
	$s->query('COMMIT');
	like($s->{stderr}, qr/40001/, 'a member deleted in Redis fails the commit');
	$s->{stderr} = '';
	ok(RlockTest::wait_until(sub { present(qw(ss:d ss:e)) == 0 }, 5),
		'and the other is given back');

	($out, $err, $ran) = watched($mon, $s,
		"SELECT rlock_session_try_set('{ss:a,ss:b}', lease => '20 s');");
	is(summary($ran), 'set ss:a ss:b', 'session scope: one command too');
	my $ttl = $redis->cmd('PTTL', 'ss:b');
	ok($ttl > 10000 && $ttl <= 20000, "with the lease asked for ($ttl ms)");
	is($s->query_safe("SELECT rlock_session_release_set('{ss:a,ss:b}')"), 2,
		'given back as a set');
	is(present(qw(ss:a ss:b)), 0, 'gone from Redis');
}

#---- a busy member ----

{
	my $h = RlockTest::session($other);
	$h->query_safe("SELECT rlock_session_try('ss:b')");
	my ($out, $err, $ran) = watched($mon, $s,
		"SELECT rlock_session_try_set('{ss:a,ss:b,ss:c}');");
	is($out, 'f', 'a busy member: no set');
	is(summary($ran), 'set ss:a ss:b ss:c',
		'one command, and no acquire of a free member');
	is(present(qw(ss:a ss:c)), 0, 'nothing of the free members in Redis');
	is($s->query_safe("SELECT count(*) FROM rlock_locks WHERE pid = $s->{rlock_pid}"),
		0, 'nor in the session');

	$mon->drain(0.05);
	RlockTest::send_query($s, "SELECT rlock_session_try_set('{ss:a,ss:b,ss:c}', '30 s');");
	ok(RlockTest::waiting_in_sql($node, 'ss:b'), 'with a wait: it waits for the busy member');
	is(present(qw(ss:a ss:c)), 0, 'holding nothing else');
	$h->query_safe("SELECT rlock_session_release('ss:b')");
	my ($got) = RlockTest::collect($s);
	like($got, qr/^t$/m, 'the release lets it take the set');
	my @ran = grep { $_->[0] eq 'set' || $_->[2] =~ /^ss:/ }
	  acquires($mon->drain(0.2));
	like(summary(\@ran), qr/^set ss:a ss:b ss:c( \| one ss:b)+ \| one ss:c \| one ss:a$/,
		'one command first, then the busy member waited for, then the rest one by one');
	is(present(qw(ss:a ss:b ss:c)), 3, 'all three in Redis');
	$s->query_safe("SELECT rlock_session_release_set('{ss:a,ss:b,ss:c}')");
	$h->quit;
}

#---- sets taken member by member ----

{
	$s->query_safe("SELECT rlock_session_try('ss:a')");
	my ($out, $err, $ran) = watched($mon, $s,
		"SELECT rlock_session_try_set('{ss:a,ss:b}');");
	is($out, 't', 'a set with a key held already is taken');
	is(summary($ran), 'one ss:a | one ss:b', 'member by member');
	is($redis->cmd('HGET', 'ss:a', $owner), 2, 'the held key re-entered');
	$s->query_safe("SELECT rlock_session_release_set('{ss:a,ss:b}')");
	$s->query_safe("SELECT rlock_session_release('ss:a')");

	($out, $err, $ran) = watched($mon, $s,
		"SELECT rlock_session_try_set('{ss:a}', shared_keys => '{ss:b}');");
	is($out, 't', 'a set with a shared key is taken');
	is(scalar(grep { $_->[0] eq 'set' } @$ran), 0, 'member by member');
	$s->query_safe("SELECT rlock_session_release_set('{ss:a}')");
	$s->query_safe("SELECT rlock_session_release_set('{}', '{ss:b}')");

	my @many = map { "ss:m$_" } 10 .. 26;
	($out, $err, $ran) = watched($mon, $s,
		"SELECT rlock_session_try_set('{" . join(',', @many) . "}');");
	is($out, 't', 'a set of 17 keys is taken');
	is(summary($ran), join(' | ', map { "one $_" } @many),
		'member by member: more than one command takes');
	is($s->query_safe("SELECT rlock_session_release_set('{" . join(',', @many) . "}')"),
		17, 'and given back');

	my @sixteen = @many[ 0 .. 15 ];
	($out, $err, $ran) = watched($mon, $s,
		"SELECT rlock_session_try_set('{" . join(',', @sixteen) . "}');");
	is(summary($ran), 'set ' . join(' ', @sixteen), '16 keys: one command');
	$s->query_safe("SELECT rlock_session_release_set('{" . join(',', @sixteen) . "}')");
	is(present(@many), 0, 'nothing left');
}

#---- a key of another type ----

{
	$redis->cmd('SET', 'ss:str', 'x');
	my ($out, $err, $ran) = watched($mon, $s,
		"SELECT rlock_session_try_set('{ss:a,ss:str}');");
	like($err, qr/58000.*Redis returned an error for lock "ss:str".*WRONGTYPE/s,
		'a key holding a string fails the call, naming that key');
	is(present('ss:a'), 0, 'nothing of the set left in Redis');
	is($s->query_safe("SELECT count(*) FROM rlock_locks WHERE pid = $s->{rlock_pid}"),
		0, 'nor in the session');
	$redis->cmd('DEL', 'ss:str');
}

#---- lost replies ----

# Run $sql in $s while Redis sleeps for a second
sub while_redis_sleeps
{
	my ($out, $err, $lines) =
	  RlockTest::while_redis_sleeps($redis, $mon, $s, $_[0]);
	return ($out, $err, [ acquires(@$lines) ]);
}

{
	my ($out, $err, $ran) =
	  while_redis_sleeps("SELECT rlock_session_try_set('{ss:la,ss:lb}');");
	is($out, 't', 'a set whose reply was lost is taken');
	is($err, '', 'without a message');
	my @set = grep { $_->[0] eq 'set' } @$ran;
	my @one = grep { $_->[0] eq 'one' } @$ran;
	ok(@set >= 1 && @one == 2 && $one[0][1] ne $set[0][1],
		'Redis ran the set, then each key alone on the next connection: '
		  . summary($ran));
	is_deeply([ map { join(',', @{ $redis->counts($_) }) } qw(ss:la ss:lb) ],
		[ 1, 1 ], 'each key counted once in Redis');
	is($s->query_safe("SELECT rlock_held('ss:la') + rlock_held('ss:lb')"), 2,
		'and in the session');
	$s->query_safe("SELECT rlock_session_release_set('{ss:la,ss:lb}')");

	($out, $err, $ran) = while_redis_sleeps(
		"SET statement_timeout = '100ms'; SELECT rlock_session_try_set('{ss:la,ss:lb}');");
	like($err, qr/57014/, 'a set given up while Redis sleeps');
	$s->query_safe('SET statement_timeout = 0');
	ok(RlockTest::wait_until(sub { present(qw(ss:la ss:lb)) == 0 }, 5),
		'whatever Redis ran of it is given back');
	is($s->query_safe("SELECT rlock_held('ss:la') + rlock_held('ss:lb')"), 0,
		'the session holds nothing');

	# Redis stopped, not asleep: the connection stays, and the grant comes
	$mon->drain(0.05);
	$redis->freeze;
	$s->query("SET statement_timeout = '100ms'; SELECT rlock_session_try_set('{ss:ga,ss:gb}');");
	like($s->{stderr}, qr/57014/, 'a set given up while Redis is stopped');
	$s->{stderr} = '';
	$s->query_safe('SET statement_timeout = 0');
	$redis->thaw;
	ok(RlockTest::wait_until(sub { present(qw(ss:ga ss:gb)) == 0 }, 5),
		'its grant, come later, is handed back: both keys');
	is(summary([ grep { $_->[0] eq 'set' } acquires($mon->drain(0.3)) ]),
		'set ss:ga ss:gb', 'Redis had granted it in one command');
	is($node->safe_psql('postgres',
		"SELECT count(*) FROM rlock_locks WHERE key IN ('ss:ga', 'ss:gb')"),
		0, 'rlock_locks shows nothing of it');
}

$s->quit;

#---- replicas to confirm ----

{
	my $replica = $redis->start_replica;
	my $n = RlockTest::node('set_script_sync', $redis,
		conf => [ 'log_min_messages = warning', 'rlock.sync_replicas = 1',
				  "rlock.sync_timeout = '300ms'" ]);
	ok(RlockTest::wait_until(sub {
		$n->safe_psql('postgres', 'SELECT sync_connection FROM rlock_status()') eq 'ready'
	}, 20), 'a sync connection for the replica');
	my $t = RlockTest::session($n);
	$mon->drain(0.05);
	is($t->query_safe("SELECT rlock_session_try_set('{ss:ra,ss:rb}')"), 't',
		'a set confirmed by the replica');
	my @lines = $mon->drain(0.2);
	my $cmds = join(' ', map { /"EVALSHA" "$sha{acquire_set}"/ ? 'set' : /"WAIT"/ ? 'wait' : () } @lines);
	like($cmds, qr/^set wait$/, 'one command, then WAIT');
	is($replica->cmd('HGET', 'ss:rb', $t->query_safe(
		"SELECT owner FROM rlock_locks WHERE key = 'ss:rb' AND pid = $t->{rlock_pid}")), 1,
		'the replica has it');
	$t->query_safe("SELECT rlock_session_release_set('{ss:ra,ss:rb}')");

	$replica->freeze;
	$t->query("SELECT rlock_session_try_set('{ss:ra,ss:rb}')");
	like($t->{stderr}, qr/58030.*Redis replicas did not confirm the locks in time/s,
		'a replica that does not confirm fails the call');
	$t->{stderr} = '';
	$replica->thaw;
	ok(RlockTest::wait_until(sub { present(qw(ss:ra ss:rb)) == 0 }, 5),
		'and every key is undone');
	is($t->query_safe("SELECT count(*) FROM rlock_locks WHERE pid = $t->{rlock_pid}"),
		0, 'the session holds nothing');
	$t->quit;
	$n->stop;
	$replica->stop;
}

#---- a Redis Cluster ----

{
	my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 1);
	my ($cn) = RlockTest::cluster_nodes($cluster, 'set_script_cluster');
	my $t = RlockTest::session($cn);

	# a slot migrating to a primary this instance has not used: the first
	# key of the slot is asked for there (ASK), with replicas confirming
	my ($from, $to) = ($cluster->primaries)[ 0, 1 ];
	my ($mk) = grep { $cluster->owner($cluster->slot($_))->port == $from->port }
	  map { "mk$_" } 1 .. 100;
	my $mslot = $cluster->slot($mk);
	$cluster->migrate_begin($mslot, $to);
	is($t->query_safe("SELECT rlock_session_try_set('{\"{$mk}a\",\"{$mk}b\"}')"), 't',
		'a set of a migrating slot, asked for on its new primary, is taken');
	is($t->query_safe("SELECT rlock_session_try('$mk')"), 't',
		'and a single key of it');
	is(join(',', map { $to->cmd('ASKING'); $to->cmd('EXISTS', $_) } "{$mk}a", "{$mk}b", $mk),
		'1,1,1', 'on the importing primary');
	$t->query_safe("SELECT rlock_session_release_set('{\"{$mk}a\",\"{$mk}b\"}')");
	$t->query_safe("SELECT rlock_session_release('$mk')");
	$cluster->migrate_end($mslot);
	my $owner_node = $cluster->owner($cluster->slot('{tag}'));
	my $cmon = $owner_node->monitor;
	$cmon->drain(0.05);
	is($t->query_safe("SELECT rlock_session_try_set('{\"{tag}b\",\"{tag}a\"}')"), 't',
		'a set of one slot is taken in a cluster');
	my @lines = $cmon->drain(0.2);
	is(summary([ grep { $_->[0] eq 'set' } acquires(@lines) ]), 'set {tag}a {tag}b',
		'in one command on the slot\'s primary');
	ok(scalar(grep { /"WAIT"/ } @lines), 'confirmed by its replica (WAIT)');
	is($t->query_safe("SELECT rlock_session_release_set('{\"{tag}a\",\"{tag}b\"}')"),
		2, 'given back');

	# two keys of other slots: member by member, each on its primary
	my @keys = ('sa', 'sb');
	isnt($cluster->slot($keys[0]), $cluster->slot($keys[1]), 'two keys of two slots');
	my @mons = map { $_->monitor } $cluster->primaries;
	$_->drain(0.05) for @mons;
	my $errors = $cn->safe_psql('postgres', 'SELECT redis_errors FROM rlock_stats()');
	is($t->query_safe("SELECT rlock_session_try_set('{sa,sb}')"), 't',
		'a set of two slots is taken');
	is($cn->safe_psql('postgres', 'SELECT redis_errors FROM rlock_stats()'), $errors,
		'without a command Redis refuses (CROSSSLOT)');
	my @ran = map { acquires($_->drain(0.2)) } @mons;
	is(join(' ', sort map { "$_->[0]:$_->[2]" } @ran), 'one:sa one:sb',
		'member by member');
	is(present($cluster->owner($cluster->slot('sa')), 'sa') +
		present($cluster->owner($cluster->slot('sb')), 'sb'), 2,
		'both held, each on its primary');
	$t->query_safe("SELECT rlock_session_release_set('{sa,sb}')");
	$t->quit;
	$cn->stop;
	$cluster->stop;
}

done_testing();
