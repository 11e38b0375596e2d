# Shared holds (rlock_try_shared and its forms) in Redis, as Redisson's
# read lock lays them out, and between sessions where one step at a time
# (isolation) cannot show it:
#
# - the data: "mode" = "read", the session's reader field (its owner
#   number plus one) with its count, one timeout key
#   {name}:<field>:rwlock_timeout:1 with the hold's lease; the hash's
#   lease never shorter than a reader's;
# - the watchdog renews the timeout key; a hold whose timeout key is gone
#   is lost: its transaction fails at commit with 40001, and the commit
#   of a shared hold always asks Redis;
# - the last reader's release frees the lock and publishes; a release
#   that leaves readers publishes nothing and keeps the hash;
# - an exclusive commit lets every waiting reader in at once; the last
#   reader's commit lets a waiting writer in; on one instance a reader that
#   may wait queues behind a waiting writer;
# - a session holding a key exclusively and shared keeps its shared hold
#   when it gives back the exclusive one: the lock becomes a read lock,
#   another session's reader gets in, and a waiting writer does not;
# - rlock_holder() names the session of a shared hold.
use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::Resp;
use RlockTest::TLS;

plan skip_all => 'the data does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('shared', $redis,
	conf => [ 'rlock.watchdog_timeout = 3000' ]);

my %sha = map {
	$_ => sha1_hex(RlockTest::script_text(
			($ENV{TESTDIR} // '.') . "/src/kinds/plain/$_.lua"))
} qw(verify);

sub sql { return $node->safe_psql('postgres', $_[0]) }

sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->{rlock_pid} = $s->query_safe('SELECT pg_backend_pid()');
	return $s;
}

# The reader fields of $key (owner => count), and the one timeout key of
# each
sub readers
{
	my ($key) = @_;
	my %h = @{ $redis->cmd('HGETALL', $key) };
	delete $h{mode};
	return \%h;
}

sub timeout_key
{
	my ($key, $field) = @_;
	my $base = $key =~ /\{/ ? $key : "{$key}";
	return "$base:$field:rwlock_timeout:1";
}

sub state_of
{
	my ($key) = @_;
	return sql("SELECT string_agg(state, ',' ORDER BY state) FROM rlock_locks WHERE key = '$key'") // '';
}

#---- the data ----

for my $key ('sl:a', 'sl{a}')
{
	my $s = session();
	$s->query_safe("BEGIN; SELECT rlock_try_shared('$key', '0', '20 s')");
	my $r = readers($key);
	is(scalar keys %$r, 1, "$key: one reader field");
	my ($field) = keys %$r;
	my $owner = sql("SELECT owner FROM rlock_locks WHERE key = '$key'");
	is($field, $owner, "$key: the field rlock_locks names");
	like($field, qr/:\d*[02468]$/, "$key: an even number: the session's own plus one");
	is($r->{$field}, 1, "$key: count 1");
	is($redis->cmd('HGET', $key, 'mode'), 'read', "$key: mode read");
	my $t = timeout_key($key, $field);
	my $pttl = $redis->cmd('PTTL', $t);
	ok($pttl > 15000 && $pttl <= 20000, "$key: its timeout key has the 20 s lease ($pttl)");
	cmp_ok($redis->cmd('PTTL', $key), '>=', $pttl - 100, "$key: the hash at least as long");
	$s->query_safe("SELECT rlock_try_shared('$key', '0', '20 s')");
	is(readers($key)->{$field}, 2, "$key: re-entered, count 2");
	is(scalar @{ $redis->cmd('KEYS', '*rwlock_timeout*') }, 1,
		"$key: still one timeout key");
	$s->query_safe('COMMIT');
	ok(RlockTest::wait_until(
			sub { $redis->cmd('EXISTS', $key, $t) == 0 }, 10),
		"$key: the commit removes the hash and the timeout key");
	$s->quit;
}

# a reader's lock does not shorten another reader's
{
	my $key = 'sl:long';
	$redis->cmd('HSET', $key, 'mode', 'read', 'java-uuid:1', '1');
	$redis->cmd('SET', timeout_key($key, 'java-uuid:1'), '1', 'PX', 60000);
	$redis->cmd('PEXPIRE', $key, 60000);
	my $s = session();
	is($s->query_safe("SELECT rlock_session_try_shared('$key', '0', '5 s')"), 't',
		'a reader joins a Java read lock');
	cmp_ok($redis->cmd('PTTL', $key), '>', 50000,
		'and leaves its 60 s lease as it was');
	is($s->query_safe("SELECT rlock_session_release_shared('$key')"), 't',
		'released');
	$s->quit;
	is_deeply(readers($key), { 'java-uuid:1' => '1' },
		'the Java reader is left, and the lock with it');
	cmp_ok($redis->cmd('PTTL', $key), '>', 50000, 'with its lease');
	$redis->cmd('DEL', $key);
}

#---- renewal, loss, the check at commit ----

{
	my $key = 'sl:w';
	my $s = session();
	$s->query_safe("BEGIN; SELECT rlock_try_shared('$key')");
	my ($field) = keys %{ readers($key) };
	my $t = timeout_key($key, $field);
	cmp_ok($redis->cmd('PTTL', $t), '<=', 3000, 'the watchdog lease: 3 s');
	ok(RlockTest::wait_for_renewal($redis, $t, 10),
		'the watchdog renews the timeout key');
	ok(RlockTest::wait_for_renewal($redis, $t, 10), 'again');
	my $mon = $redis->monitor;
	$s->query_safe('COMMIT');
	my $verified = grep { ref $_ eq '' && /"evalsha" "$sha{verify}"/i }
	  $mon->drain(0.3);
	is($verified, 1, 'the commit of a shared hold asks Redis (verify)');
	$s->quit;

	# its timeout key gone: lost, whatever the field says
	$s = session();
	$s->query_safe("BEGIN; SELECT rlock_try_shared('$key')");
	($field) = keys %{ readers($key) };
	$redis->cmd('DEL', timeout_key($key, $field));
	$s->query('COMMIT');
	like($s->{stderr}, qr/could not serialize|40001|lost/,
		'a shared hold without its timeout key fails its commit (40001)');
	$s->{stderr} = '';
	$s->quit;
	$redis->cmd('DEL', $key);
}

#---- releases: readers left, the last one ----

{
	my $key = 'sl:rel';
	my @s = map { session() } 1 .. 2;
	$_->query_safe("BEGIN; SELECT rlock_try_shared('$key')") for @s;
	is(scalar keys %{ readers($key) }, 2, 'two readers, two fields');
	my $sub = $redis->connect;
	$sub->send_cmd('SUBSCRIBE', "redisson_lock__channel:{$key}",
		"redisson_rwlock:{$key}");
	$sub->read_reply(5) for 1 .. 2;
	$s[0]->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { scalar keys %{ readers($key) } == 1 }, 10),
		'the first commit removes its field only');
	is($sub->next_message(0.5), undef, 'and publishes nothing');
	$s[1]->query_safe('COMMIT');
	my %got;
	while (my $m = $sub->next_message(5))
	{
		$got{ $m->[0] } = $m->[1];
		last if keys %got == 2;
	}
	is_deeply(\%got,
		{ "redisson_lock__channel:{$key}" => '0', "redisson_rwlock:{$key}" => '0' },
		'the last one frees the lock and tells both channels "0", as a read unlock does');
	is($redis->cmd('EXISTS', $key), 0, 'the hash is gone');
	$_->quit for @s;
}

#---- waking: readers all at once, a writer at the last reader ----

{
	my $key = 'sl:wake';
	# leases of 60 s: a waiter woken by its timer would wait that long
	my $w = session();
	$w->query_safe("BEGIN; SELECT rlock_try('$key', '0', '60 s')");
	my @r = map { session() } 1 .. 3;
	for my $r (@r)
	{
		RlockTest::send_query($r,
			"BEGIN; SELECT rlock_try_shared('$key', '30 s', '60 s');");
	}
	ok(RlockTest::wait_until(sub { state_of($key) eq 'held,waiting,waiting,waiting' }, 10),
		'three readers wait for a writer');
	my $t0 = time;
	$w->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { state_of($key) eq 'held,held,held' }, 10),
		'its commit lets all three in');
	cmp_ok(time - $t0, '<', 10, 'at the commit, not at the 60 s lease');
	my @got = map { (RlockTest::collect($_))[0] } @r;
	is(scalar(grep { /^t$/m } @got), 3, 'each rlock_try_shared returned true');
	is(scalar keys %{ readers($key) }, 3, 'three reader fields');

	# a writer waits for the last of them
	RlockTest::send_query($w, "BEGIN; SELECT rlock_try('$key', '50 s');");
	ok(RlockTest::wait_until(sub { state_of($key) eq 'held,held,held,waiting' }, 10),
		'a writer waits for the readers');
	$r[0]->query_safe('COMMIT');
	$r[1]->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { state_of($key) eq 'held,waiting' }, 10),
		'and still waits while one is left');
	$t0 = time;
	$r[2]->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { state_of($key) eq 'held' }, 10),
		'the last reader\'s commit lets it in');
	cmp_ok(time - $t0, '<', 10, 'at the commit');
	is((RlockTest::collect($w))[0], 't', 'rlock_try returned true');
	$w->query_safe('COMMIT');
	$_->quit for @r, $w;
}

#---- on one instance, a reader that may wait queues behind a writer ----

{
	my $key = 'sl:queue';
	my $r1 = session();
	$r1->query_safe("BEGIN; SELECT rlock_try_shared('$key', '0', '60 s')");
	my $w = session();
	RlockTest::send_query($w, "BEGIN; SELECT rlock_try('$key', '30 s');");
	ok(RlockTest::wait_until(sub { state_of($key) eq 'held,waiting' }, 10),
		'a writer waits for a reader');
	my $r2 = session();
	RlockTest::send_query($r2, "BEGIN; SELECT rlock_try_shared('$key', '30 s');");
	ok(RlockTest::wait_until(sub { state_of($key) eq 'held,waiting,waiting' }, 10),
		'a second reader that may wait queues behind the writer');
	is(scalar keys %{ readers($key) }, 1, 'and is not in the lock');
	$r1->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { state_of($key) eq 'held,waiting' }, 10),
		'the first reader gone, the writer gets it first');
	is($redis->cmd('HGET', $key, 'mode'), 'write', 'as a write lock');
	is((RlockTest::collect($w))[0], 't', 'rlock_try returned true');
	$w->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { state_of($key) eq 'held' }, 10),
		'then the second reader');
	is((RlockTest::collect($r2))[0], 't', 'rlock_try_shared returned true');
	$r2->query_safe('COMMIT');
	$_->quit for $r1, $w, $r2;
}

#---- exclusive and shared in one session ----

{
	my $key = 'sl:down';
	my $s1 = session();
	$s1->query_safe("BEGIN; SELECT rlock_try('$key'), rlock_try_shared('$key')");
	my $h = readers($key);
	is(scalar keys %$h, 2, 'one session holding both modes has two fields');
	is($redis->cmd('HGET', $key, 'mode'), 'write', 'the lock is a write lock');
	my $s2 = session();
	RlockTest::send_query($s2, "BEGIN; SELECT rlock_try('$key', '30 s');");
	ok(RlockTest::wait_until(sub { state_of($key) =~ /waiting/ }, 10),
		'a writer of another session waits');
	is($s1->query_safe("SELECT rlock_release('$key')"), 't',
		'the first session gives back its exclusive hold');
	is($redis->cmd('HGET', $key, 'mode'), 'read', 'the lock became a read lock');
	is(scalar keys %{ readers($key) }, 1, 'the reader field stays');
	is(sql("SELECT rlock_try_shared('$key')"), 't',
		'another session\'s reader gets in');
	is(state_of($key), 'held,waiting', 'the writer still waits');
	$s1->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { state_of($key) eq 'held' }, 10),
		'and gets it at the commit of the shared hold');
	is((RlockTest::collect($s2))[0], 't', 'rlock_try returned true');

	# rlock_holder names the session of a shared hold
	$s2->query_safe('COMMIT');
	$s1->query_safe("BEGIN; SELECT rlock_try_shared('$key')");
	ok(RlockTest::wait_until(
			sub { (sql("SELECT pid FROM rlock_holder('$key')") // '') eq $s1->{rlock_pid} }, 15),
		'rlock_holder() names the session of a shared hold')
	  or diag(sql("SELECT * FROM rlock_holder('$key')") . "\n"
		  . join(' ', @{ $redis->cmd('HGETALL', $key) }) . "\n"
		  . join(' ', map { ($_, @{ $redis->cmd('HGETALL', $_) }) }
			  @{ $redis->cmd('KEYS', 'rlock_instance:*') }));
	$s1->query_safe('COMMIT');
	$_->quit for $s1, $s2;
}

done_testing();
