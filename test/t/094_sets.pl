# Sets of plain locks taken all or none (rlock_try_set and its forms),
# looked at in Redis, between the sessions of two instances:
#
# - a member another session holds: the call fails at once (no wait), or
#   when its wait runs out, and while it waits and after it fails no
#   other member is in Redis; once the member is free the call gets the
#   whole set;
# - a key the session held before a failed call keeps its count;
# - a call cancelled, or ended by lock_timeout, while it waits for its
#   first busy member or for a later one holding an earlier one, leaves
#   nothing in Redis, in session scope too;
# - a savepoint rolled back gives back the set taken in it (and keeps an
#   older hold), the commit gives back the rest; a session-scoped set
#   outlives the transaction and is given back by
#   rlock_session_release_set;
# - overlapping sets, each named in an order of its own, some members
#   shared, taken by eight pgbench clients of two instances for 8 s with
#   a 20 s wait: none ever waits it out (no deadlock, no livelock), no
#   exclusive member's section overlaps another's on the same key, and
#   shared ones do overlap.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use IPC::Run ();
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'sets do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my @conf = ('log_min_messages = warning');
my $na = RlockTest::node('sets_a', $redis, conf => [@conf]);
my $nb = RlockTest::node('sets_b', $redis, conf => [@conf]);

# how many of @keys are in Redis
sub present
{
	return scalar grep { $redis->cmd('EXISTS', $_) } @_;
}

# the owner field of session $s's hold of $key
sub owner_of
{
	my ($s, $key) = @_;
	return $s->{rlock_node}->safe_psql('postgres',
		"SELECT owner FROM rlock_locks WHERE key = '$key' AND pid = $s->{rlock_pid} AND count > 0");
}

# the rows of session $s in rlock_locks that hold something
sub holds_of
{
	my ($s) = @_;
	return $s->{rlock_node}->safe_psql('postgres',
		"SELECT count(*) FROM rlock_locks WHERE pid = $s->{rlock_pid} AND count > 0");
}

#---- all or nothing ----

{
	my $h = RlockTest::session($nb);
	$h->query_safe("SELECT rlock_session_try('ms:b')");
	my $s = RlockTest::session($na);

	is($s->query_safe("SELECT rlock_session_try_set('{ms:a,ms:b,ms:c}')"), 'f',
		'a member held by another instance\'s session: no set');
	is(present('ms:a', 'ms:c'), 0, 'and none of the other members in Redis');

	my $t0 = time;
	is($s->query_safe("BEGIN; SELECT rlock_try_set('{ms:c,ms:b,ms:a}', '1 s')"), 'f',
		'with a wait: no set when it runs out');
	cmp_ok(time - $t0, '>=', 0.9, 'after the wait');
	is(present('ms:a', 'ms:c'), 0, 'none of the other members in Redis');
	is(holds_of($s), 0, 'nor in the session');
	$s->query_safe('COMMIT');

	RlockTest::send_query($s,
		"BEGIN; SELECT rlock_try_set('{ms:a,ms:b,ms:c}', '30 s');");
	ok(RlockTest::waiting_in_sql($na, 'ms:b'), 'a call waits for the busy member');
	ok(RlockTest::wait_until(sub { present('ms:a', 'ms:c') == 0 }, 5),
		'holding no other member while it waits');
	is(present('ms:a', 'ms:c'), 0, 'still none a moment later');
	$h->query_safe("SELECT rlock_session_release('ms:b')");
	my ($out) = RlockTest::collect($s);
	like($out, qr/^t$/m, 'the release lets it take the whole set');
	is(present('ms:a', 'ms:b', 'ms:c'), 3, 'all three in Redis');
	is($redis->cmd('HGET', 'ms:b', owner_of($s, 'ms:b')), 1,
		'held by the session that took the set');
	$s->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { present('ms:a', 'ms:b', 'ms:c') == 0 }, 5),
		'the commit gives back the set');
	$_->quit for $s, $h;
}

#---- a key held before a failed call keeps its count ----

{
	my $h = RlockTest::session($nb);
	$h->query_safe("SELECT rlock_session_try('ms:b')");
	my $s = RlockTest::session($na);
	$s->query_safe("SELECT rlock_session_try('ms:a')");
	my $owner = owner_of($s, 'ms:a');
	is($s->query_safe("SELECT rlock_session_try_set('{ms:a,ms:b,ms:c}', '300 ms')"),
		'f', 'a set with a key held already and a busy one fails');
	is($redis->cmd('HGET', 'ms:a', $owner), 1,
		'the key held before keeps its count in Redis');
	is($s->query_safe("SELECT rlock_held('ms:a')"), 1, 'and in the session');
	is(present('ms:c'), 0, 'the free member is not held');
	$h->query_safe("SELECT rlock_session_release('ms:b')");
	is($s->query_safe("SELECT rlock_session_try_set('{ms:a,ms:b,ms:c}')"), 't',
		'once free the set is taken');
	is($redis->cmd('HGET', 'ms:a', $owner), 2, 'the held key re-entered');
	is($s->query_safe("SELECT rlock_session_release_set('{ms:a,ms:b,ms:c}')"), 3,
		'rlock_session_release_set gives back the set');
	is($redis->cmd('HGET', 'ms:a', $owner), 1, 'the older hold stays');
	$s->query_safe("SELECT rlock_session_release('ms:a')");
	is(present('ms:a', 'ms:b', 'ms:c'), 0, 'nothing left');
	$_->quit for $s, $h;
}

#---- cancel and lock_timeout leave nothing ----

for my $form ('rlock_lock_set', 'rlock_session_lock_set')
{
	# the first busy member, waited for alone
	my $h1 = RlockTest::session($nb);
	my $h2 = RlockTest::session($nb);
	$h1->query_safe("SELECT rlock_session_try('mc:b')");
	$h2->query_safe("SELECT rlock_session_try('mc:c')");
	my $s = RlockTest::session($na);
	RlockTest::send_query($s, "BEGIN; SELECT $form('{mc:a,mc:b,mc:c}');");
	ok(RlockTest::waiting_in_sql($na, 'mc:b'), "$form: waits for the first busy member");
	$na->safe_psql('postgres', "SELECT pg_cancel_backend($s->{rlock_pid})");
	my (undef, $err) = RlockTest::collect($s);
	like($err, qr/57014/, "$form: cancelled");
	$s->query('ROLLBACK');
	is(holds_of($s), 0, "$form: the session holds nothing");
	ok(RlockTest::wait_until(sub { present('mc:a') == 0 }, 5),
		"$form: nothing of the set in Redis");

	# a later member, waited for holding an earlier one
	RlockTest::send_query($s, "BEGIN; SELECT $form('{mc:a,mc:b,mc:c}');");
	ok(RlockTest::waiting_in_sql($na, 'mc:b'), "$form: waits for mc:b again");
	$h1->query_safe("SELECT rlock_session_release('mc:b')");
	ok(RlockTest::waiting_in_sql($na, 'mc:c'),
		"$form: given mc:b, it waits for mc:c");
	is($redis->cmd('HGET', 'mc:b', owner_of($s, 'mc:b')), 1,
		"$form: holding mc:b, ordered before it");
	$na->safe_psql('postgres', "SELECT pg_cancel_backend($s->{rlock_pid})");
	(undef, $err) = RlockTest::collect($s);
	like($err, qr/57014/, "$form: cancelled");
	$s->query('ROLLBACK');
	is(holds_of($s), 0, "$form: the session holds nothing");
	ok(RlockTest::wait_until(sub { present('mc:a', 'mc:b') == 0 }, 5),
		"$form: mc:b given back in Redis, mc:a never kept");

	# lock_timeout, the same
	$s->query_safe("SET lock_timeout = '300ms'");
	RlockTest::send_query($s, "SELECT $form('{mc:a,mc:b,mc:c}');");
	(undef, $err) = RlockTest::collect($s);
	like($err, qr/55P03/, "$form: lock_timeout ends the wait with 55P03");
	$s->query_safe('RESET lock_timeout');
	is(holds_of($s), 0, "$form: the session holds nothing");
	ok(RlockTest::wait_until(sub { present('mc:a', 'mc:b') == 0 }, 5),
		"$form: nothing of the set in Redis");
	$h2->query_safe("SELECT rlock_session_release('mc:c')");
	$_->quit for $s, $h1, $h2;
}

#---- savepoints, the commit, the session scope ----

{
	my $s = RlockTest::session($na);
	$s->query_safe("BEGIN; SELECT rlock_try('mp:p'); SAVEPOINT sp;");
	my $owner = owner_of($s, 'mp:p');
	$s->query_safe("SELECT rlock_try_set('{mp:q,mp:p}', shared_keys => '{mp:t}')");
	is($redis->cmd('HGET', 'mp:p', $owner), 2, 'a set in a savepoint re-enters a held key');
	is(present('mp:q', 'mp:t'), 2, 'and takes the others');
	is($redis->cmd('HGET', 'mp:t', 'mode'), 'read', 'a shared member as a read lock');
	$s->query_safe('ROLLBACK TO SAVEPOINT sp');
	ok(RlockTest::wait_until(sub { present('mp:q', 'mp:t') == 0 }, 5),
		'the rollback to the savepoint gives back the set');
	is($redis->cmd('HGET', 'mp:p', $owner), 1, 'and keeps the older hold');
	$s->query_safe("SELECT rlock_try_set('{mp:r,mp:q}')");
	$s->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { present('mp:p', 'mp:q', 'mp:r') == 0 }, 5),
		'the commit gives back everything');

	$s->query_safe("SELECT rlock_session_try_set('{mp:s1,mp:s2}', shared_keys => '{mp:s3}')");
	$s->query_safe('BEGIN; SELECT 1; ROLLBACK');
	is(present('mp:s1', 'mp:s2', 'mp:s3'), 3, 'a session-scoped set outlives a transaction');
	is($s->query_safe("SELECT rlock_session_release_set('{mp:s2,mp:s1}', '{mp:s3}')"),
		3, 'rlock_session_release_set counts three');
	ok(RlockTest::wait_until(sub { present('mp:s1', 'mp:s2', 'mp:s3') == 0 }, 5),
		'and gives them back');
	$s->quit;
}

#---- overlapping sets under load ----

{
	my $dir = PostgreSQL::Test::Utils::tempdir();
	# each set names its keys in an order of its own; sk:4 is shared in
	# some sets and exclusive in others, sk:2 likewise, and the last two
	# sets share both
	my @sets = (
		[ '{sk:1,sk:2,sk:3}', '{sk:4}' ],
		[ '{sk:3,sk:2,sk:1}', '{sk:4}' ],
		[ '{sk:4,sk:1}', '{sk:2}' ],
		[ '{sk:3,sk:4}', '{}' ],
		[ '{sk:2,sk:4,sk:1,sk:3}', '{}' ],
		[ '{sk:5}', '{sk:4,sk:2}' ],
		[ '{sk:6}', '{sk:2,sk:4}' ],
	);
	for my $node ($na, $nb)
	{
		$node->safe_psql('postgres', q{
			CREATE TABLE spans (key text, shared bool, s float8, e float8);
			CREATE TABLE gave_up (at timestamptz);
			CREATE FUNCTION span(keys text[], shared text[], s float8)
			RETURNS void LANGUAGE sql AS $$
				INSERT INTO spans
				SELECT k, false, s, extract(epoch FROM clock_timestamp())
				FROM unnest(keys) k
				UNION ALL
				SELECT k, true, s, extract(epoch FROM clock_timestamp())
				FROM unnest(shared) k
			$$;
		});
	}
	my @files;
	for my $i (0 .. $#sets)
	{
		my ($keys, $shared) = @{ $sets[$i] };
		my $file = "$dir/set$i.sql";
		open(my $fh, '>', $file) or die "$file: $!";
		print $fh "BEGIN;\n"
		  . "SELECT rlock_try_set('$keys', '20 s', NULL, '$shared') AS got \\gset\n"
		  . "\\if :got\n"
		  . "SELECT extract(epoch FROM clock_timestamp()) AS s \\gset\n"
		  . "SELECT pg_sleep(0.002);\n"
		  . "SELECT span('$keys', '$shared', :s);\n"
		  . "\\else\n"
		  . "INSERT INTO gave_up VALUES (now());\n"
		  . "\\endif\n"
		  . "COMMIT;\n";
		close $fh;
		push @files, '-f', $file;
	}
	my @runs;
	for my $node ($na, $nb)
	{
		my $out = '';
		push @runs, [ \$out, IPC::Run::start(
				[ 'pgbench', '-n', '-c', 4, '-j', 1, '-T', 8, @files,
				  '-h', $node->host, '-p', $node->port, 'postgres' ],
				'<', \undef, '>&', \$out) ];
	}
	my $t0 = time;
	$_->[1]->finish for @runs;
	my $took = time - $t0;
	my $output = join('', map { ${ $_->[0] } } @runs);
	my ($done) = (0);
	$done += $1 while $output =~ /number of transactions actually processed: (\d+)/g;
	cmp_ok($took, '<', 20, "the clients stop on time ($took s): none waits on a cycle");
	unlike($output, qr/^pgbench: error/m, 'no client aborted');
	unlike($output, qr/number of failed transactions: [1-9]/, 'no transaction failed');
	cmp_ok($done, '>', 100, "the sets were taken $done times");
	my $gave_up = 0;
	$gave_up += $_->safe_psql('postgres', 'SELECT count(*) FROM gave_up') for $na, $nb;
	is($gave_up, 0, 'no call waited out its 20 s');

	# no exclusive section overlaps another section on its key
	my %by_key;
	for my $node ($na, $nb)
	{
		for (split /\n/, $node->safe_psql('postgres', 'SELECT key, shared, s, e FROM spans'))
		{
			my ($key, $shared, $s, $e) = split /\|/;
			push @{ $by_key{$key} }, [ $shared eq 't', $s, $e ];
		}
	}
	my ($overlaps, $shared_overlaps, $sections) = (0, 0, 0);
	for my $key (sort keys %by_key)
	{
		my @spans = sort { $a->[1] <=> $b->[1] } @{ $by_key{$key} };
		$sections += @spans;
		for my $i (0 .. $#spans)
		{
			for my $j ($i + 1 .. $#spans)
			{
				last if $spans[$j][1] >= $spans[$i][2];
				if ($spans[$i][0] && $spans[$j][0])
				{
					$shared_overlaps++;
				}
				else
				{
					$overlaps++;
				}
			}
		}
	}
	is($overlaps, 0, "no exclusive section overlaps another on its key ($sections sections)");
	cmp_ok($shared_overlaps, '>', 0,
		"shared sections overlapped ($shared_overlaps times)");
	is(present(map { "sk:$_" } 1 .. 6), 0, 'nothing left in Redis');
}

$_->stop for $na, $nb;
done_testing();
