# DCX_CHECK_GTEST: googletest for the test suites (Debian: libgtest-dev).
AC_DEFUN([DCX_CHECK_GTEST], [
AC_LANG_PUSH([C++])
dcx_save_LIBS="$LIBS"
LIBS="-lgtest -lpthread $LIBS"
AC_MSG_CHECKING([for googletest])
AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <gtest/gtest.h>]],
                                [[testing::InitGoogleTest(); return 0;]])],
    [AC_MSG_RESULT([yes]); GTEST_LIBS="-lgtest -lpthread"],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([googletest not found (Debian/Ubuntu: apt-get install libgtest-dev)])])
LIBS="$dcx_save_LIBS"
AC_LANG_POP([C++])
AC_SUBST([GTEST_LIBS])
])
